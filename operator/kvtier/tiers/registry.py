"""The one list of tier types, and the lookups policy/, render/ and observe/ ask it.

A disk type that is not registered is never provisioned as another one: `disk_tier` raises a
RenderError (reason DiskTypeNotSupported) that names the known types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierSpec
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.settings import EffectiveSettings
from kvtier.tiers.base import TierType
from kvtier.tiers.cephfs import CEPHFS
from kvtier.tiers.cpu import CPU_TIER
from kvtier.tiers.nvme import NVME
from kvtier.tiers.object_store import OBJECT_STORE

# The secondary tiers, in the order sizing lists them (kvtier.sizing.disk_types).
DISK_TIERS: tuple[TierType, ...] = (NVME, CEPHFS, OBJECT_STORE)
CPU: TierType = CPU_TIER
TIERS: tuple[TierType, ...] = (CPU, *DISK_TIERS)
UNSUPPORTED_REASON = "DiskTypeNotSupported"
# status.tiers names of the tiers kvtier evict keeps ("nvme", "cephfs"; a bucket needs none).
EVICTED_STATUS_NAMES = tuple(t.status_name for t in TIERS if t.evicted)

_BY_NAME = {t.name: t for t in DISK_TIERS}
_BY_STATUS_NAME = {t.status_name: t for t in TIERS}


def known_disk_types() -> str:
    """The registered disk types, for a person."""
    return ", ".join(t.name for t in DISK_TIERS)


def disk_tier(name: str | None) -> TierType | None:
    """The registered disk tier of that API name (None for none), else RenderError."""
    if name is None:
        return None
    found = _BY_NAME.get(name)
    if found is None:
        raise RenderError(
            UNSUPPORTED_REASON,
            f"{name} is not a disk tier type kvtier provisions ({known_disk_types()})",
        )
    return found


def find_disk_tier(name: str | None) -> TierType | None:
    """The registered disk tier of that API name; None for none or one not registered."""
    return _BY_NAME.get(name) if name is not None else None


def status_name(name: str | None) -> str | None:
    """status.tiers[].name of the disk tier of that API name; None for none or an unknown."""
    found = find_disk_tier(name)
    return found.status_name if found is not None else None


def tier_by_status_name(name: object) -> TierType | None:
    """The tier whose status.tiers entry has that name, if any."""
    return _BY_STATUS_NAME.get(name) if isinstance(name, str) else None


def available_disks(
    spec: KVCacheTierSpec,
    settings: EffectiveSettings,
    nodes: Sequence[Mapping[str, Any]],
    eligible: Set[str],
) -> frozenset[str]:
    """The disk types the cluster offers the KVCacheTier (what Auto chooses among)."""
    return frozenset(t.name for t in DISK_TIERS if t.available(spec, settings, nodes, eligible))


def policy_writes(
    policy: KVCachePolicySpec | None, settings: EffectiveSettings
) -> list[DesiredWrite]:
    """Every tier type's cluster-scoped objects only the KVCachePolicy writes, in order."""
    return [w for t in DISK_TIERS for w in t.policy_writes(policy, settings)]
