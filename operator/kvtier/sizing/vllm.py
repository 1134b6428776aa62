"""vLLM `--kv-transfer-config` for the OffloadingConnector.

`cpu_bytes_to_use` is the total over all workers of the server. Every disk read or write is
staged through the CPU tier, so a disk tier is always a secondary tier of TieringOffloadingSpec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_DISK_TIER_TYPE = {"NVMe": "fs", "CephFS": "fs", "ObjectStore": "obj"}


def kv_transfer_config(
    cpu_bytes_to_use: int,
    block_tokens: int,
    disk: str | None = None,
    *,
    eviction_policy: str = "lru",
    fs_root_dir: str = "/mnt/kv-cache",
    n_read_threads: int = 16,
    n_write_threads: int = 16,
    object_store_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config for a CPU tier, plus a secondary tier when `disk` names one."""
    extra: dict[str, Any]
    if disk is None:
        extra = {
            "spec_name": "CPUOffloadingSpec",
            "cpu_bytes_to_use": cpu_bytes_to_use,
            "block_size": block_tokens,
        }
        if eviction_policy != "lru":  # lru is vLLM's default; keep the common case minimal
            extra["eviction_policy"] = eviction_policy
    else:
        tier: dict[str, Any]
        if _DISK_TIER_TYPE[disk] == "fs":
            tier = {
                "type": "fs",
                "root_dir": fs_root_dir,
                "n_read_threads": n_read_threads,
                "n_write_threads": n_write_threads,
            }
        else:
            tier = {"type": "obj", **(object_store_options or {})}
        extra = {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": cpu_bytes_to_use,
            "block_size": block_tokens,
            "eviction_policy": eviction_policy,
            "secondary_tiers": [tier],
        }
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra,
    }


def kv_transfer_config_arg(config: Mapping[str, Any]) -> str:
    """The compact JSON to pass as the value of `--kv-transfer-config`."""
    return json.dumps(config, separators=(",", ":"))
