"""vLLM `--kv-transfer-config` for the OffloadingConnector.

`cpu_bytes_to_use` is the total over all workers of the server. Every disk read or write is
staged through the CPU tier, so a disk tier is always a secondary tier of TieringOffloadingSpec.
Secondary tier keys go straight to the tier's constructor: the obj tier takes one `store_config`
(vLLM's ObjStoreConfig: bucket, endpoint_override, scheme, credentials).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from kvtier.sizing.disk_types import BY_NAME
from kvtier.sizing.record import Record

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Where vLLM keeps a CPU tier it shares between its processes: a file of each engine in
# /dev/shm, which must hold it (releases that leave the CPU-only tier in private memory don't).
SHM_PATH = "/dev/shm"
SHM_FILES = f"{SHM_PATH}/vllm_offload_*.mmap"
# The container env the model server reads the object store's keys from (a Secret's keys, set
# by reference): the AWS SDK's own names, which its default credential chain reads.
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"


class ObjectStore(Record):
    """An S3 bucket for the obj tier. Credentials never pass through kvtier: with
    `keys_in_config` (releases whose ObjStoreConfig requires them) the config names them as
    `$(AWS_ACCESS_KEY_ID)` / `$(AWS_SECRET_ACCESS_KEY)`, which Kubernetes expands from the
    container's env at start; otherwise vLLM's AWS SDK reads that env itself."""

    bucket: str
    endpoint: str  # https://host[:port]
    keys_in_config: bool = False

    def store_config(self) -> dict[str, str]:
        from urllib.parse import urlsplit  # only an obj tier needs it (start-up time)

        url = urlsplit(self.endpoint)
        config = {
            "bucket": self.bucket,
            "endpoint_override": (url.netloc + url.path.rstrip("/")) or self.endpoint,
            "scheme": url.scheme or "https",
        }
        if self.keys_in_config:
            config["access_key"] = f"$({ACCESS_KEY_ENV})"
            config["secret_key"] = f"$({SECRET_KEY_ENV})"
        return config


class ConnectorSettings(Record):
    """The OffloadingConnector's settings for a CPU tier, plus a secondary tier when `disk`
    names one: everything of the config but the CPU tier's bytes, which travel as one integer
    from the sizing to the model server (Sizing.cpu_bytes_to_use, then each role's
    RoleOffload.cpu_bytes) and join these settings only where the config is written."""

    block_tokens: int
    disk: str | None = None
    eviction_policy: str = "lru"
    fs_root_dir: str = "/mnt/kv-cache"
    n_read_threads: int = 16
    n_write_threads: int = 16
    object_store: ObjectStore | None = None

    def __post_init__(self) -> None:
        if self.secondary_type == "obj" and self.object_store is None:
            raise ValueError("an obj tier needs its bucket and endpoint")

    @property
    def secondary_type(self) -> str | None:
        """vLLM's type of the secondary tier: "fs", "obj", None for a CPU tier alone."""
        return None if self.disk is None else BY_NAME[self.disk].vllm_type

    def kv_transfer_config(self, cpu_bytes_to_use: int) -> dict[str, Any]:
        """The config with a CPU tier of `cpu_bytes_to_use`."""
        extra: dict[str, Any]
        if self.disk is None:
            extra = {
                "spec_name": "CPUOffloadingSpec",
                "cpu_bytes_to_use": cpu_bytes_to_use,
                "block_size": self.block_tokens,
            }
            if self.eviction_policy != "lru":  # vLLM's default; keep the common case minimal
                extra["eviction_policy"] = self.eviction_policy
        else:
            tier: dict[str, Any]
            if self.secondary_type == "fs":
                tier = {
                    "type": "fs",
                    "root_dir": self.fs_root_dir,
                    "n_read_threads": self.n_read_threads,
                    "n_write_threads": self.n_write_threads,
                }
            else:
                assert self.object_store is not None  # __post_init__
                tier = {"type": "obj", "store_config": self.object_store.store_config()}
            extra = {
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": cpu_bytes_to_use,
                "block_size": self.block_tokens,
                "eviction_policy": self.eviction_policy,
                "secondary_tiers": [tier],
            }
        return {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        }


def kv_transfer_config(
    cpu_bytes_to_use: int,
    block_tokens: int,
    disk: str | None = None,
    *,
    eviction_policy: str = "lru",
    fs_root_dir: str = "/mnt/kv-cache",
    n_read_threads: int = 16,
    n_write_threads: int = 16,
    object_store: ObjectStore | None = None,
) -> dict[str, Any]:
    """The config for a CPU tier, plus a secondary tier when `disk` names one."""
    settings = ConnectorSettings(
        block_tokens,
        disk,
        eviction_policy,
        fs_root_dir,
        n_read_threads,
        n_write_threads,
        object_store,
    )
    return settings.kv_transfer_config(cpu_bytes_to_use)


def kv_transfer_config_arg(config: Mapping[str, Any]) -> str:
    """The compact JSON to pass as the value of `--kv-transfer-config`."""
    return json.dumps(config, separators=(",", ":"))
