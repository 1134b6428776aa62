"""What each vLLM release does with the CPU tier, as far as sizing and the pod spec care.

Only releases the conformance suite pins (hack/conformance, tests/fixtures/vllm/<version>.json)
are listed: a behaviour here was read from that release's own code and checked against its
own classes. Any patch release of a listed minor series behaves like it; another series is
refused, never guessed (docs/sizing.md, "vLLM versions").
"""

from __future__ import annotations

import re

from kvtier.sizing.errors import SizingError
from kvtier.sizing.record import Record

FIELD = "vllmVersion"
VERSION_PATTERN = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-][0-9A-Za-z.+-]*)?$"
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-][0-9A-Za-z.+-]*)?$")


class VLLMRelease(Record):
    """One vLLM minor series and the behaviours kvtier sizes and renders by."""

    series: str  # "0.24"
    # The CPU tier's chunk is rounded up to this many bytes (SharedOffloadRegion alignment);
    # 1 where the tier is private memory without that alignment.
    cpu_only_alignment: int
    tiering_alignment: int
    # CPUOffloadingSpec's buffer lives in /dev/shm (a shared mmap); TieringOffloadingSpec's
    # always does.
    cpu_only_in_shm: bool
    # MLA at TP > 1, one node, mp executor: one replicated copy of the latent, not one per rank.
    mla_replicated: bool
    # The /dev/shm offload file survives an OOMKill and a container restart.
    leaves_stale_shm_file: bool
    # Block hashes depend on PYTHONHASHSEED unless it is shared (replicas sharing a disk tier).
    needs_shared_hash_seed: bool
    # Nemotron NAS `replace_with_linear` attention blocks build.
    builds_linear_attention_blocks: bool
    # The obj tier's ObjStoreConfig requires access_key and secret_key (no SDK fallback).
    object_store_keys_in_config: bool


RELEASES: dict[str, VLLMRelease] = {
    # The study's release.
    "0.24": VLLMRelease(
        series="0.24",
        cpu_only_alignment=1,
        tiering_alignment=4096,
        cpu_only_in_shm=False,
        mla_replicated=False,
        leaves_stale_shm_file=True,
        needs_shared_hash_seed=True,
        builds_linear_attention_blocks=True,
        object_store_keys_in_config=True,
    ),
    "0.33": VLLMRelease(
        series="0.33",
        cpu_only_alignment=4096,
        tiering_alignment=4096,
        cpu_only_in_shm=True,
        mla_replicated=True,
        leaves_stale_shm_file=False,
        needs_shared_hash_seed=False,
        builds_linear_attention_blocks=False,
        object_store_keys_in_config=False,
    ),
}
DEFAULT_VLLM_VERSION = "0.24"


def vllm_release(version: str) -> VLLMRelease:
    """The release a version string (0.24, 0.24.1, v0.33.0, 0.33.0+cu128) belongs to."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise SizingError(FIELD, f"{version!r} is not a vLLM version such as 0.24 or 0.33.0")
    series = f"{int(match.group(1))}.{int(match.group(2))}"
    release = RELEASES.get(series)
    if release is None:
        known = ", ".join(f"{s}.x" for s in RELEASES)
        raise SizingError(
            FIELD,
            f"vLLM {version} is not a release kvtier has checked against vLLM's own code "
            f"({known}); set the version of the nearest checked release explicitly if its "
            "behaviour matches",
        )
    return release
