"""The shape of a KVCacheTier's status for people and tools: status.tiers, the CPU and disk
tier columns and the plan's summary, and the probe results status.tiers already holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.tier import Mode
from kvtier.render.quantities import short_quantity
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.tiers.registry import CPU, DISK_TIERS, find_disk_tier, status_name

__all__ = ["disk_tier_text", "measured", "plan_summary", "short_quantity", "status_tiers"]


def measured(prev_tiers: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Probe results in status, by sizing disk name (NVMe, CephFS, ObjectStore)."""
    names = {t.status_name: t.name for t in DISK_TIERS}
    return {
        names[t["name"]]: t["probe"]
        for t in prev_tiers
        if isinstance(t, Mapping)
        and t.get("name") in names
        and (t.get("probe") or {}).get("p99Seconds") is not None
    }


def status_tiers(
    sp: SizingPlan,
    previous: Sequence[Mapping[str, Any]],
    disk: Mapping[str, Any],
    applied: bool,
    probe: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    old = {t.get("name"): t for t in previous if isinstance(t, Mapping)}
    tiers: list[dict[str, Any]] = [
        {"name": CPU.status_name, "capacityBytes": sp.sizing.cpu_bytes_to_use, "ready": applied}
    ]
    for t in sp.to_status()["tiers"]:
        name = status_name(str(t["name"])) or str(t["name"]).lower()
        entry: dict[str, Any] = {"name": name, "ready": bool(disk.get("ready"))}
        if disk.get("claimName"):
            entry["claimName"] = disk["claimName"]
        if disk.get("capacityQuantity"):
            entry["capacityBytes"] = quantity_bytes(disk["capacityQuantity"])
        for key in (
            "crossoverTokens",
            "restoreBlocksPerSecond",
            "beneficial",
            "decidedBy",
            "latency",
            "throughput",
        ):
            if t.get(key) is not None:
                entry[key] = t[key]
        if probe is not None and name == status_name(sp.disk):
            entry["probe"] = probe
        elif "probe" in old.get(name, {}):
            entry["probe"] = old[name]["probe"]  # measurements outlive a re-plan
        tiers.append(entry)
    listed = {t["name"] for t in tiers}
    # A measured tier that is no longer chosen (dropped as not beneficial) keeps its numbers,
    # so the next reconcile decides from them again instead of flip-flopping.
    tiers += [
        {"name": n, "ready": False, "beneficial": False, "probe": t["probe"]}
        for n, t in old.items()
        if n not in listed and isinstance(n, str) and "probe" in t
    ]
    return tiers


def disk_tier_text(sp: SizingPlan, eff: EffectiveSettings, capacity: object) -> str:
    """status.diskTier: what the disk tier's type says of itself (`capacity`: the claimed
    quantity the cluster shows), "None" without one."""
    if sp.disk is None:
        return "None"
    disk = find_disk_tier(sp.disk)
    return disk.status_text(sp, eff, capacity) if disk is not None else sp.disk


def plan_summary(sp: SizingPlan, mode: str) -> str:
    lines = [
        f"{'Apply' if mode == Mode.APPLY else 'Plan'} mode: topology {sp.sizing.topology}, "
        f"CPU tier {short_quantity(sp.sizing.cpu_bytes_to_use)} "
        f"(cpu_bytes_to_use={sp.sizing.cpu_bytes_to_use}), "
        f"disk tier {sp.disk or 'none'}.",
        *(f"{k}: {v}" for k, v in sp.decisions.items()),
        *(f"warning: {w}" for w in sp.warnings),
    ]
    return "\n".join(lines)
