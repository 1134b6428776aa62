"""A tier's health as observed: TierEffective and status.observed from vLLM's metrics,
DiskPressure and usedBytes from the evictor's gauges, and the prefill vLLM measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import ConditionType, KVCacheTierSpec
from kvtier.policy.conditions import UNKNOWN, Verdict
from kvtier.policy.contract import Facts
from kvtier.policy.gate import ObservedEvidence
from kvtier.policy.stored import prune
from kvtier.tiers.registry import EVICTED_STATUS_NAMES


def measured_prefill(spec: KVCacheTierSpec, facts: Facts) -> float | None:
    """Prefill seconds per token measured from vLLM's metrics (kvtier.observe), used when no
    spec.probe.baselineTTFTSeconds is typed."""
    obs = facts.observation
    if spec.probe is not None and spec.probe.baseline_ttft_seconds is not None:
        return None
    return None if obs is None or obs.t_prefill is None else obs.t_prefill.seconds_per_token


def observed_evidence(spec: KVCacheTierSpec, facts: Facts) -> ObservedEvidence | None:
    """TierEffective as the gate's evidence: the server's own counters outrank the model."""
    obs = facts.observation
    if obs is None:
        return None
    state = obs.state
    return ObservedEvidence(
        state.status, state.reason, state.message, measured_prefill(spec, facts)
    )


def disk_pressure(
    facts: Facts, policy: KVCachePolicySpec | None, disk_tier: str | None
) -> tuple[Verdict, int | None] | None:
    """DiskPressure and the used bytes of an NVMe or CephFS tier, from its evictor's gauges
    (kvtier.observe.disk); until the first reading, what the status already says."""
    if policy is None or policy.metrics is None or disk_tier not in EVICTED_STATUS_NAMES:
        return None
    kind = ConditionType.DISK_PRESSURE.value
    obs = facts.observation
    disk = obs.disk if obs is not None else None
    if disk is None or disk.tier != disk_tier:
        status = facts.tier.get("status") or {}
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
        if cond is None:
            return Verdict(
                kind,
                UNKNOWN,
                "AwaitingMetrics",
                "the first reading of the evictor's metrics is pending",
            ), None
        return Verdict(kind, cond["status"], cond["reason"], cond["message"]), None
    state = disk.state
    return Verdict(kind, state.status, state.reason, state.message), disk.used_bytes


def set_used_bytes(
    tiers: list[dict[str, Any]], previous: Sequence[Any], name: str, used: int | None
) -> None:
    """usedBytes of the disk tier: the latest reading, else the one last written."""
    if used is None:
        old = next((t for t in previous if isinstance(t, Mapping) and t.get("name") == name), {})
        used = old.get("usedBytes")
    for entry in tiers:
        if entry["name"] == name and used is not None:
            entry["usedBytes"] = used


def tier_effective(facts: Facts, policy: KVCachePolicySpec | None) -> tuple[Verdict, Any] | None:
    """TierEffective and status.observed from the latest reading of the target's vLLM
    metrics; until the first one, what the status already says (a restart loses nothing)."""
    if policy is None or policy.metrics is None:
        return None
    kind = ConditionType.TIER_EFFECTIVE.value
    status = facts.tier.get("status") or {}
    obs = facts.observation
    if obs is None:
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
        if cond is None:
            return Verdict(
                kind, UNKNOWN, "AwaitingMetrics", "the first reading of vLLM's metrics is pending"
            ), None
        return Verdict(kind, cond["status"], cond["reason"], cond["message"]), status.get(
            "observed"
        )
    state = obs.state
    observed = obs.observed if obs.observed is not None else status.get("observed")
    return Verdict(kind, state.status, state.reason, state.message), same_reading(
        observed, status.get("observed")
    )


def same_reading(new: Any, old: Any) -> Any:
    """The stored reading when the new one repeats its figures: only `readAt` would change,
    and a status write per tier per observer pass would be a heartbeat that tells no one
    anything (an idle model server's figures never move)."""
    if not isinstance(new, Mapping) or not isinstance(old, Mapping):
        return new
    figures = prune({k: v for k, v in new.items() if k != "readAt"})
    return old if figures == prune({k: v for k, v in old.items() if k != "readAt"}) else new
