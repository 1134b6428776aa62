"""One tier's observation as status: status.observed and the TierEffective verdict (pure).

The hysteresis state lives in the tier's own status (the condition in force, plus
observed.pendingStatus/pendingCount), so an operator restart loses none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from kvtier.api.observation import EffectiveState, Observation, Status, TPrefill
from kvtier.observe.disk import CONDITION as DISK_CONDITION
from kvtier.observe.figures import Figures, figures
from kvtier.observe.series import Snapshot, increases
from kvtier.observe.verdict import (
    Thresholds,
    Verdict,
    choose_t_prefill,
    judge,
    settle,
    unavailable,
)
from kvtier.tiers.registry import EVICTED_STATUS_NAMES

CONDITION = "TierEffective"
REASON_WINDOW_FILLING = "WindowFilling"

Source = Literal["Prometheus", "DirectScrape"]


@dataclass(frozen=True)
class TierFacts:
    """What the observer needs of a KVCacheTier, read from its spec and status."""

    namespace: str
    name: str
    target: str
    block_bytes: int
    block_tokens: int
    workers: int
    average_context_tokens: int
    baseline_ttft: float | None
    previous: EffectiveState | None
    previous_t_prefill: float | None = None  # the measured t_prefill last written
    disk_tier: str | None = None  # the status.tiers[] name of an NVMe or CephFS tier
    disk_claim: str | None = None  # a CephFS tier's claim (its evictor Deployment's name)
    disk_previous: EffectiveState | None = None  # the DiskPressure condition in force


def _workers(model: Mapping[str, Any], status: Mapping[str, Any]) -> int:
    """TP × PP workers of one engine: the spec's TP, else the decode role's parallelism."""
    if model.get("tensorParallelSize"):
        return int(model["tensorParallelSize"])
    roles = (status.get("plan") or {}).get("roles") or []
    role = next((r for r in roles if r.get("role") == "decode"), None) or {}
    return max(1, int(role.get("tensor") or 1) * int(role.get("pipeline") or 1))


def _status(value: object) -> Status | None:
    return value if value in ("True", "False", "Unknown") else None


def _condition_state(status: Mapping[str, Any], kind: str) -> EffectiveState | None:
    for c in status.get("conditions") or []:
        state = _status(c.get("status"))
        if c.get("type") == kind and state is not None:
            return EffectiveState(state, str(c.get("reason") or ""), str(c.get("message") or ""))
    return None


def tier_facts(tier: Mapping[str, Any]) -> TierFacts | None:
    """None until the tier is sized (the block size comes from status.sizing)."""
    meta = tier.get("metadata") or {}
    spec = tier.get("spec") or {}
    status = tier.get("status") or {}
    sizing = status.get("sizing") or {}
    block_bytes = sizing.get("blockBytes")
    if not block_bytes or not meta.get("namespace"):
        return None
    model = spec.get("model") or {}
    effective = {e.get("field"): e.get("value") for e in status.get("effective") or []}
    block_tokens = int(model.get("blockSizeTokens") or effective.get("model.blockSizeTokens") or 16)
    previous = None
    for c in status.get("conditions") or []:
        state = _status(c.get("status"))
        if c.get("type") == CONDITION and state is not None:
            observed = status.get("observed") or {}
            previous = EffectiveState(
                state,
                str(c.get("reason") or ""),
                str(c.get("message") or ""),
                _status(observed.get("pendingStatus")),
                int(observed.get("pendingCount") or 0),
            )
    workload = spec.get("workload") or {}
    probe = spec.get("probe") or {}
    disk: Mapping[str, Any] = next(
        (t for t in status.get("tiers") or [] if t.get("name") in EVICTED_STATUS_NAMES), {}
    )
    return TierFacts(
        namespace=meta["namespace"],
        name=meta.get("name", ""),
        target=(spec.get("targetRef") or {}).get("name", ""),
        block_bytes=int(block_bytes),
        block_tokens=block_tokens,
        workers=_workers(model, status),
        average_context_tokens=int(workload.get("averageContextTokens") or 0),
        baseline_ttft=probe.get("baselineTTFTSeconds"),
        previous=previous,
        previous_t_prefill=(status.get("observed") or {}).get("measuredTPrefillSeconds"),
        disk_tier=disk.get("name"),
        disk_claim=disk.get("claimName"),
        disk_previous=_condition_state(status, DISK_CONDITION),
    )


def steady(measured: float | None, previous: float | None, margin: float) -> float | None:
    """The measured t_prefill, held at its last value while it moves less than `margin`
    (relative), so the crossover derived from it does not follow every window's noise."""
    if measured is None or previous is None or previous <= 0:
        return measured
    return previous if abs(measured - previous) < margin * previous else measured


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def observed_status(
    fig: Figures, t_prefill: TPrefill | None, source: Source, read_at: datetime
) -> dict[str, Any]:
    crossover = (
        fig.load_seconds_per_block / t_prefill.seconds_per_token
        if t_prefill is not None and fig.load_seconds_per_block is not None
        else None
    )
    out: dict[str, Any] = {
        "readAt": read_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "windowSeconds": _round(fig.window_seconds),
        "source": source,
        "promptTokens": _round(fig.prompt_tokens),
        "tokensFromOffload": _round(fig.tokens_from_offload),
        "tokensRecomputed": _round(fig.tokens_recomputed),
        "tokensLocalHit": _round(fig.tokens_local_hit),
        "externalHitRatio": _round(fig.external_hit_ratio),
        "restoreBytesPerSecond": _round(fig.restore_bytes_per_second),
        "loadSecondsPerBlock": _round(fig.load_seconds_per_block),
        "blocksRestored": _round(fig.blocks_restored),
        "storesDropped": _round(fig.stores_dropped),
        "measuredTPrefillSeconds": _round(fig.t_prefill_seconds_per_token),
        "tPrefillSeconds": None if t_prefill is None else _round(t_prefill.seconds_per_token),
        "tPrefillSource": None if t_prefill is None else t_prefill.source,
        "crossoverTokens": _round(crossover),
        "tiers": [
            {
                "tier": t.tier,
                "chunkHits": _round(t.chunk_hits),
                "chunkHitRatio": _round(t.hit_ratio),
                "readBytesPerSecond": _round(t.read_bytes_per_second),
                "storesDropped": _round(t.stores_dropped),
            }
            for t in fig.tiers
        ]
        or None,
    }
    return {k: v for k, v in out.items() if v is not None}


def _with_pending(observed: dict[str, Any] | None, state: EffectiveState) -> dict[str, Any] | None:
    if observed is None:
        return None
    if state.pending_status is not None:
        observed["pendingStatus"] = state.pending_status
        observed["pendingCount"] = state.pending_count
    return observed


def evaluate(
    facts: TierFacts,
    before: Snapshot | None,
    after: Snapshot,
    th: Thresholds,
    source: Source,
    read_at: datetime,
) -> Observation:
    """The verdict over the window from `before` to `after`, settled against the last one."""
    if before is None or (not before.values and after.values):
        verdict = Verdict(
            "Unknown", REASON_WINDOW_FILLING, "no samples a full window back yet: waiting for one"
        )
        state = settle(verdict, facts.previous, th)
        return Observation(state, None)
    fig = figures(increases(before, after), facts.block_bytes, workers=facts.workers)
    held = steady(fig.t_prefill_seconds_per_token, facts.previous_t_prefill, th.margin)
    fig = replace(fig, t_prefill_seconds_per_token=held)
    t_prefill = choose_t_prefill(
        facts.baseline_ttft, facts.average_context_tokens, fig.t_prefill_seconds_per_token
    )
    verdict = judge(fig, t_prefill, facts.block_tokens, th, facts.previous)
    state = settle(verdict, facts.previous, th)
    measured = (
        TPrefill(fig.t_prefill_seconds_per_token, "Measured")
        if fig.t_prefill_seconds_per_token
        else None
    )
    observed = observed_status(fig, t_prefill, source, read_at)
    return Observation(state, _with_pending(observed, state), measured)


def failed(message: str) -> Observation:
    """A read that failed: Unknown at once (no confirmation: the figures are gone)."""
    verdict = unavailable(message)
    return Observation(EffectiveState(verdict.status, verdict.reason, verdict.message), None)
