"""Is a probed disk tier worth using? Restore vs recompute from a probe result.

The two views (latency: one request on an idle server; throughput: a loaded server, where a
restore costs no GPU time) are kvtier.sizing.tiers.assess_tier; this adds what a controller
needs on top: a condition reason naming the view that decided, observed evidence from the
server's own metrics (which outranks the model), the object-store tail-latency ceiling from
the KVCachePolicy, and buffered results. A tier is never judged not beneficial on the model
alone when its views disagree or a figure is missing: that verdict is Unknown, not False.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kvtier.api.tier import ProbeResult
from kvtier.settings import BUILTIN_DEFAULTS
from kvtier.sizing import SizingPlan, assess_tier, normalize_disk_type
from kvtier.sizing.disk_types import SHARED_DISK_TYPES
from kvtier.sizing.tiers import LatencyView, ThroughputView, tier_share

_STATUS_KEYS = frozenset(f.alias or name for name, f in ProbeResult.model_fields.items())


@dataclass(frozen=True)
class ObservedEvidence:
    """What the model server's own metrics say of the tier over a window (TierEffective).

    status True: it serves hits and restoring beats recomputing by the observed numbers;
    False: it does not; Unknown: too little traffic to tell. prefill_seconds_per_token is the
    measured prefill compute time, which the model's views use instead of TTFT ÷ context.
    """

    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    prefill_seconds_per_token: float | None = None


@dataclass(frozen=True)
class TierVerdict:
    """beneficial is None when a measurement or the baseline TTFT is missing."""

    beneficial: bool | None
    crossover_tokens: int | None
    prefill_seconds_per_token: float | None
    restore_seconds: float | None  # moving an average context at the probed bandwidth
    recompute_seconds: float | None  # the baseline TTFT at the average context
    degraded: bool
    reason: str  # CamelCase, for a condition
    message: str
    decided_by: str | None = None  # observed | latency | throughput | both
    latency: LatencyView | None = None
    throughput: ThroughputView | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "beneficial": self.beneficial,
            "crossoverTokens": self.crossover_tokens,
            "prefillSecondsPerToken": self.prefill_seconds_per_token,
            "restoreSeconds": self.restore_seconds,
            "recomputeSeconds": self.recompute_seconds,
            "degraded": self.degraded,
            "reason": self.reason,
            "message": self.message,
            "decidedBy": self.decided_by,
            "latency": None if self.latency is None else self.latency.as_dict(),
            "throughput": None if self.throughput is None else self.throughput.as_dict(),
        }


def plan_share(sp: SizingPlan) -> float:
    """The part of an average prefix expected from the plan's disk tier (1 without one)."""
    if sp.disk is None:
        return 1.0
    s = sp.sizing
    return tier_share(
        s.cpu_bytes_to_use, s.working_set_bytes, sp.input.replicas, sp.disk in SHARED_DISK_TYPES
    )


def gate_tier(
    probe_result: ProbeResult | Mapping[str, Any] | None,
    block_bytes: int,
    context_tokens: int,
    baseline_ttft: float | None,
    kind: str,
    object_store_max_p99: float | None = BUILTIN_DEFAULTS.object_store_max_p99_seconds,
    *,
    block_tokens: int = BUILTIN_DEFAULTS.block_size_tokens,
    share: float = 1.0,
    bytes_per_token: int | None = None,
    observed: ObservedEvidence | None = None,
) -> TierVerdict:
    """Judge one tier from its probe (a ProbeResult or its camelCase dict, as in status).

    kind: NVMe, CephFS or ObjectStore (any case). An ObjectStore tier whose p99 exceeds
    `object_store_max_p99` is degraded: its tail lands directly in TTFT. share: the part of an
    average prefix expected from the tier (kvtier.sizing.tier_share; 1 when unknown).
    observed: the TierEffective evidence, when the server's metrics give one.
    """
    tier = normalize_disk_type(kind, "kind")
    probe = (
        probe_result
        if isinstance(probe_result, ProbeResult) or probe_result is None
        # The full `kvtier probe` document carries details beyond the status block.
        else ProbeResult.model_validate(
            {k: v for k, v in probe_result.items() if k in _STATUS_KEYS}
        )
    )
    p99 = None if probe is None else probe.p99_seconds
    bandwidth = None if probe is None else probe.bandwidth_bytes_per_second
    measured_prefill = None if observed is None else observed.prefill_seconds_per_token
    if p99 is None and not bandwidth:
        return TierVerdict(
            beneficial=None,
            crossover_tokens=None,
            prefill_seconds_per_token=measured_prefill,
            restore_seconds=None,
            recompute_seconds=baseline_ttft,
            degraded=False,
            reason="NotProbed",
            message=f"{tier}: no probe result yet",
        )
    assessment = assess_tier(
        tier,
        selected=True,
        context_tokens=context_tokens,
        block_tokens=block_tokens,
        block_bytes=block_bytes,
        ttft_seconds=baseline_ttft,
        p99_seconds=p99,
        # A zero bandwidth means no reads completed: not a measurement to divide by.
        bandwidth=float(bandwidth) if bandwidth else None,
        share=share,
        bytes_per_token=bytes_per_token,
        prefill_seconds_per_token=measured_prefill,
    )
    measured = f"p99 {p99:g} s" if p99 is not None else "p99 unknown"
    if bandwidth:
        measured += f", {bandwidth / 1e6:.4g} MB/s"
    notes = [f"{tier} probe: {measured}", assessment.reason]
    if probe is not None and probe.buffered:
        notes.append("buffered I/O (O_DIRECT refused): latencies are optimistic")

    degraded = (
        tier == "ObjectStore"
        and object_store_max_p99 is not None
        and p99 is not None
        and p99 > object_store_max_p99
    )
    beneficial = assessment.beneficial
    decided_by = assessment.decided_by
    if degraded:
        reason = "TailLatencyAboveCeiling"
        notes.insert(
            1, f"p99 {p99:g} s exceeds the policy's object-store ceiling {object_store_max_p99:g} s"
        )
    elif observed is not None and observed.status != "Unknown":
        # The server's own counters outrank any model of it.
        beneficial = observed.status == "True"
        decided_by = "observed"
        reason = "ObservedRestoreWins" if beneficial else "ObservedRecomputeWins"
        notes.insert(1, f"observed ({observed.reason}): {observed.message}; the model says")
    elif assessment.latency is None:
        reason = "NoBaselineTTFT"
    elif beneficial is None:
        reason = "NothingToRestore" if assessment.latency.tier_tokens == 0 else "ViewsDisagree"
    elif beneficial:
        reason = "RestoreWinsUnderLoad" if decided_by == "throughput" else "RestoreWins"
    else:
        reason = "RecomputeWins"
    latency = assessment.latency
    return TierVerdict(
        beneficial=beneficial,
        crossover_tokens=assessment.crossover_tokens,
        prefill_seconds_per_token=None if latency is None else latency.prefill_seconds_per_token,
        restore_seconds=assessment.restore_seconds,
        recompute_seconds=assessment.recompute_seconds,
        degraded=degraded,
        reason=reason,
        message="; ".join(notes),
        decided_by=decided_by,
        latency=latency,
        throughput=assessment.throughput,
    )
