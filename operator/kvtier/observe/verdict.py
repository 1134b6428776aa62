"""The TierEffective decision over a window's figures, with hysteresis (pure).

True: the tier serves hits and restoring a block beats recomputing it by the observed numbers.
False: it serves no hits (e.g. a CPU tier smaller than the GPU KV cache only mirrors HBM),
restoring a block takes longer than recomputing it, or stores are dropped.
Unknown: too little traffic in the window to tell, or no metrics.

Against flapping: a threshold crossed one way must be crossed back by `margin` before the
verdict returns, and a new status replaces the old one only after `confirmations`
evaluations in a row agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvtier.api.observation import EffectiveState, Status, TPrefill
from kvtier.observe.figures import Figures

# Condition reasons (docs/troubleshooting.md, TierEffective).
REASON_SERVES_HITS = "ServesHits"
REASON_NO_HITS = "NoHits"
REASON_RESTORE_SLOWER = "RestoreSlowerThanRecompute"
REASON_STORES_DROPPED = "StoresDropped"
REASON_LOW_TRAFFIC = "LowTraffic"
REASON_METRICS_UNAVAILABLE = "MetricsUnavailable"


@dataclass(frozen=True)
class Thresholds:
    min_prompt_tokens: float = 10_000  # prompt tokens in the window below which: Unknown
    min_hit_ratio: float = 0.01  # external prefix-cache hit ratio below which: no hits
    max_stores_dropped: float = 0  # dropped stores in the window above which: False
    margin: float = 0.1  # relative band a figure must clear to undo a verdict
    confirmations: int = 2  # evaluations in a row before the status flips


def choose_t_prefill(
    baseline_ttft: float | None, context_tokens: int, measured: float | None
) -> TPrefill | None:
    """A typed baseline wins; otherwise the measured value; None when neither is known."""
    if baseline_ttft is not None and baseline_ttft > 0 and context_tokens > 0:
        return TPrefill(baseline_ttft / context_tokens, "Baseline")
    if measured is not None and measured > 0:
        return TPrefill(measured, "Measured")
    return None


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    message: str


def _g(value: float) -> str:
    return f"{value:.3g}"


def judge(
    fig: Figures,
    t_prefill: TPrefill | None,
    block_tokens: int,
    th: Thresholds,
    previous: EffectiveState | None = None,
) -> Verdict:
    """This window's verdict; `previous` only widens the bands (hysteresis)."""
    if fig.prompt_tokens < th.min_prompt_tokens:
        return Verdict(
            "Unknown",
            REASON_LOW_TRAFFIC,
            f"{fig.prompt_tokens:.0f} prompt tokens in {fig.window_seconds:.0f} s, "
            f"fewer than {th.min_prompt_tokens:.0f}: too little traffic to tell",
        )
    was = previous.reason if previous is not None else None
    dropped = fig.stores_dropped or 0.0
    if dropped > th.max_stores_dropped:
        return Verdict(
            "False",
            REASON_STORES_DROPPED,
            f"{dropped:.0f} offload stores dropped in {fig.window_seconds:.0f} s "
            "(allocation failures or tier backpressure): the tier cannot keep up",
        )
    ratio = fig.external_hit_ratio or 0.0
    need = th.min_hit_ratio * (1 + th.margin) if was == REASON_NO_HITS else th.min_hit_ratio
    hits = f"external hit ratio {_g(ratio)} ({fig.external_hits or 0:.0f} of "
    hits += f"{fig.external_queries or 0:.0f} tokens queried)"
    if ratio < need:
        return Verdict(
            "False",
            REASON_NO_HITS,
            f"{hits}, below {_g(need)}: the tier serves no hits "
            "(a CPU tier smaller than the GPU KV cache only mirrors HBM)",
        )
    per_block = fig.load_seconds_per_block
    if t_prefill is not None and per_block is not None:
        recompute = block_tokens * t_prefill.seconds_per_token
        limit = recompute * (1 - th.margin) if was == REASON_RESTORE_SLOWER else recompute
        timing = (
            f"restore {_g(per_block)} s per {block_tokens}-token block vs recompute "
            f"{_g(recompute)} s (t_prefill {_g(t_prefill.seconds_per_token)} s/token, "
            f"{t_prefill.source.lower()})"
        )
        if per_block >= limit:
            return Verdict("False", REASON_RESTORE_SLOWER, f"{hits}; {timing}: recompute is faster")
        return Verdict("True", REASON_SERVES_HITS, f"{hits}; {timing}")
    unmeasured = "no restore timing" if per_block is None else "no t_prefill (baseline or measured)"
    return Verdict("True", REASON_SERVES_HITS, f"{hits}; {unmeasured} to compare restore with")


def unavailable(message: str) -> Verdict:
    return Verdict("Unknown", REASON_METRICS_UNAVAILABLE, message)


def settle(verdict: Verdict, previous: EffectiveState | None, th: Thresholds) -> EffectiveState:
    """Apply the confirmation count: the status in force changes only when `confirmations`
    verdicts in a row want it (the first evaluation sets it at once)."""
    if previous is None:
        return EffectiveState(verdict.status, verdict.reason, verdict.message)
    if verdict.status == previous.status:
        return EffectiveState(verdict.status, verdict.reason, verdict.message)
    count = previous.pending_count + 1 if previous.pending_status == verdict.status else 1
    if count >= th.confirmations:
        return EffectiveState(verdict.status, verdict.reason, verdict.message)
    return replace(previous, pending_status=verdict.status, pending_count=count)
