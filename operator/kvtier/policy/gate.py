"""Is a probed disk tier worth using? Restore vs recompute from a probe result.

The math (crossover L = T_p99 / t_prefill, bandwidth-limited restore time) is
kvtier.sizing.tiers.assess_tier; this adds what a controller needs on top: a condition
reason, the object-store tail-latency ceiling from the KVCachePolicy, and buffered results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtier.api.tier import ProbeResult
from kvtier.policy.effective import BUILTIN_DEFAULTS
from kvtier.sizing import assess_tier, normalize_disk_type

_STATUS_KEYS = frozenset(f.alias or name for name, f in ProbeResult.model_fields.items())


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
        }


def gate_tier(
    probe_result: ProbeResult | Mapping[str, Any] | None,
    block_bytes: int,
    context_tokens: int,
    baseline_ttft: float | None,
    kind: str,
    object_store_max_p99: float | None = BUILTIN_DEFAULTS.object_store_max_p99_seconds,
    *,
    block_tokens: int = BUILTIN_DEFAULTS.block_size_tokens,
) -> TierVerdict:
    """Judge one tier from its probe (a ProbeResult or its camelCase dict, as in status).

    kind: NVMe, CephFS or ObjectStore (any case). An ObjectStore tier whose p99 exceeds
    `object_store_max_p99` is degraded: its tail lands directly in TTFT.
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
    if p99 is None and not bandwidth:
        return TierVerdict(
            beneficial=None,
            crossover_tokens=None,
            prefill_seconds_per_token=None,
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
    if degraded:
        reason = "TailLatencyAboveCeiling"
        notes.insert(
            1, f"p99 {p99:g} s exceeds the policy's object-store ceiling {object_store_max_p99:g} s"
        )
    elif baseline_ttft is None:
        reason = "NoBaselineTTFT"
    else:  # a baseline and at least one measurement always give a verdict
        reason = "RestoreWins" if assessment.beneficial else "RecomputeWins"
    return TierVerdict(
        beneficial=assessment.beneficial,
        crossover_tokens=assessment.crossover_tokens,
        prefill_seconds_per_token=(
            None if baseline_ttft is None else baseline_ttft / context_tokens
        ),
        restore_seconds=assessment.restore_seconds,
        recompute_seconds=assessment.recompute_seconds,
        degraded=degraded,
        reason=reason,
        message="; ".join(notes),
    )
