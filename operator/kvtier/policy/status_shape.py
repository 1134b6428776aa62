"""The shape of a KVCacheTier's status for people and tools: status.tiers, the CPU and disk
tier columns and the plan's summary, and the probe results status.tiers already holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.tier import Mode
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan

DISK_TIER_NAMES = {"NVMe": "nvme", "CephFS": "cephfs", "ObjectStore": "objectstore"}


def short_quantity(n: int) -> str:
    """Bytes as a compact binary quantity for people: 547608330240 → 510Gi."""
    for unit, size in (("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20)):
        if n >= size:
            value = n / size
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return str(n)


def measured(prev_tiers: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Probe results in status, by sizing disk name (NVMe, CephFS, ObjectStore)."""
    names = {v: k for k, v in DISK_TIER_NAMES.items()}
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
        {"name": "cpu", "capacityBytes": sp.sizing.cpu_bytes_to_use, "ready": applied}
    ]
    for t in sp.to_status()["tiers"]:
        name = DISK_TIER_NAMES.get(str(t["name"]), str(t["name"]).lower())
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
        if probe is not None and name == DISK_TIER_NAMES.get(sp.disk or ""):
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
    if sp.disk is None:
        return "None"
    if sp.disk == "NVMe" and eff.nvme_pool is not None:
        return f"NVMe ({eff.nvme_pool.name})"
    if sp.disk == "CephFS":
        size = (
            quantity_bytes(str(capacity)) if capacity else sp.sizing.working_set_bytes_all_replicas
        )
        return f"CephFS {short_quantity(size)}"
    return sp.disk


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
