"""Which tiers to build, by the study's rules.

Working set fits the CPU tier → CPU only (a disk tier adds little). It does not fit and there
is one replica → local NVMe (lowest secondary-tier latency). Several replicas → CephFS (slower
per block, but replicas share one cache). Object storage only when explicitly available: its
p99 tail lands directly in TTFT.
"""

from __future__ import annotations

from collections.abc import Set

from kvtier.sizing.disk_types import DISK_TYPES
from kvtier.sizing.errors import SizingError
from kvtier.sizing.record import Record

CPU_ONLY = "CPUOnly"
TOPOLOGIES: tuple[str, ...] = (CPU_ONLY, *(f"CPUAnd{d}" for d in DISK_TYPES))
_NO_DISK = (
    "the working set does not fit the CPU tier and there is no disk tier: "
    "reuse beyond the CPU tier is recomputed"
)


class TopologyDecision(Record):
    topology: str
    disk: str | None  # the secondary tier, None for CPUOnly
    reason: str
    warnings: tuple[str, ...] = ()


def choose_topology(
    fits: bool, replicas: int, available: Set[str], disk_type: str = "Auto"
) -> TopologyDecision:
    """The topology for a working set that does or does not fit the CPU tier.

    `disk_type` is Auto (the rules above), None (never a disk tier) or a disk type to force.
    """
    if disk_type == "None":
        return TopologyDecision(
            CPU_ONLY, None, "disk tier disabled (disk type None)", () if fits else (_NO_DISK,)
        )
    if disk_type != "Auto":
        if disk_type not in available:
            raise SizingError(
                "disk.type", f"{disk_type} is not available here (available: {_names(available)})"
            )
        little = (f"the working set fits the CPU tier: {disk_type} adds little",) if fits else ()
        return TopologyDecision(
            f"CPUAnd{disk_type}", disk_type, f"disk type {disk_type} requested", little
        )
    if fits:
        return TopologyDecision(CPU_ONLY, None, "the working set fits the CPU tier")

    if replicas == 1:
        order = ["NVMe", "CephFS"]
        why = "does not fit, one replica: local NVMe has the lowest latency"
    else:
        order = ["CephFS", "NVMe"]
        why = f"does not fit, {replicas} replicas: CephFS lets them share one cache"
    preferred = order[0]
    # The other types after these two, in the table's order (ObjectStore last).
    candidates = [d for d in [*order, *(d for d in DISK_TYPES if d not in order)] if d in available]
    if not candidates:
        return TopologyDecision(CPU_ONLY, None, f"{why}; no disk type available", (_NO_DISK,))
    disk = candidates[0]
    if disk == preferred:
        return TopologyDecision(f"CPUAnd{disk}", disk, why)
    warnings = [f"{preferred} is not available: falling back to {disk}"]
    if disk == "NVMe":
        warnings.append("NVMe tiers are per node: replicas do not share cached blocks")
    return TopologyDecision(
        f"CPUAnd{disk}", disk, f"{why}; {preferred} unavailable, using {disk}", tuple(warnings)
    )


def _names(available: Set[str]) -> str:
    return ", ".join(sorted(available)) or "none"
