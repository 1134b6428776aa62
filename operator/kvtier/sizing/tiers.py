"""Restore or recompute: does a disk tier pay, one request at a time and under load?

The study's rule: t_prefill = baseline TTFT / context length (TTFT measured with offload off;
a measured prefill compute time per token is better, since a loaded server's TTFT is mostly
queueing), and the crossover L = T_p99 / t_prefill, with T_p99 the tier's fio p99 latency at
the model's block size. Two views judge a tier:

- latency (one request, idle server): contexts longer than L restore faster than they
  recompute, and restoring the part of an average prefix expected from this tier (what the
  CPU tier cannot hold) must beat recomputing that part;
- throughput (a loaded server): a restore costs I/O time and no GPU time, so every token the
  tier serves is prefill the GPUs skip; the tier's bandwidth is a capacity (tokens per second
  for all replicas that share it), and its p99 tail must cost a restoring request less TTFT
  than the prefill it saves.

When the views disagree the throughput view decides (the study measured its gains under load);
both losing is the only "recompute wins".
"""

from __future__ import annotations

import math
from decimal import Decimal

from kvtier.sizing.disk_types import DISK_FACTS, DISK_TYPES
from kvtier.sizing.errors import SizingError
from kvtier.sizing.record import Record, replace

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_DISK_ALIASES = {alias: d.name for d in DISK_FACTS for alias in d.aliases}


def normalize_disk_type(name: str, field: str) -> str:
    """Canonical disk type name (NVMe, CephFS, ObjectStore) from any case or alias."""
    canonical = _DISK_ALIASES.get(name.strip().lower().replace("-", ""))
    if canonical is None:
        raise SizingError(field, f"unknown disk type {name!r}; use {'|'.join(DISK_TYPES)}")
    return canonical


def crossover_tokens(p99_seconds: float, ttft_seconds: float, context_tokens: int) -> int:
    """L = T_p99 / t_prefill, rounded up to whole tokens.

    Decimal keeps worked numbers exact (0.6 s p99 at 60 s TTFT for 50,000 tokens is 500).
    """
    prefill = Decimal(str(ttft_seconds)) / context_tokens
    return math.ceil(Decimal(str(p99_seconds)) / prefill)


def bandwidth_restore_seconds(
    context_tokens: int, block_tokens: int, block_bytes: int, bandwidth: float
) -> float:
    """Time to move a context's blocks (whole blocks: a partial one is stored whole)."""
    blocks = math.ceil(context_tokens / block_tokens)
    return blocks * block_bytes / bandwidth


def restore_seconds(
    context_tokens: int,
    block_tokens: int,
    block_bytes: int,
    p99_seconds: float | None,
    bandwidth: float | None,
) -> float:
    """Latency plus transfer: the restore curve drawn against recompute by `kvtier plan --plot`."""
    transfer = (
        bandwidth_restore_seconds(context_tokens, block_tokens, block_bytes, bandwidth)
        if bandwidth
        else 0.0
    )
    return (p99_seconds or 0.0) + transfer


def tier_share(cpu_bytes: int, working_set_bytes: int, replicas: int, shared: bool) -> float:
    """The part of an average prefix expected from a disk tier: what the CPU tier lacks.

    The CPU tier holds min(1, tier ÷ working set) of a replica's prefixes. A tier that all
    replicas share also serves turns that land on another replica than the previous one; with
    no session affinity a turn finds its own replica's CPU tier 1/replicas of the time.
    """
    held = min(1.0, cpu_bytes / working_set_bytes) if working_set_bytes > 0 else 1.0
    if shared and replicas > 1:
        held /= replicas
    return 1.0 - held


class LatencyView(Record):
    """One request on an idle server: restoring its prefix against computing it."""

    prefill_seconds_per_token: float
    prefill_source: str  # Measured | BaselineTTFT
    crossover_tokens: int | None  # L = p99 / t_prefill
    tier_tokens: int  # the part of an average prefix expected from the tier
    restore_seconds: float | None  # p99 + that part's blocks at the bandwidth
    recompute_seconds: float  # that part × t_prefill
    beneficial: bool | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "prefillSecondsPerToken": self.prefill_seconds_per_token,
            "prefillSource": self.prefill_source,
            "crossoverTokens": self.crossover_tokens,
            "tierTokens": self.tier_tokens,
            "restoreSeconds": self.restore_seconds,
            "recomputeSeconds": self.recompute_seconds,
            "beneficial": self.beneficial,
            "reason": self.reason,
        }


class ThroughputView(Record):
    """A loaded server: what the tier serves is prefill the GPUs skip, up to its bandwidth."""

    restore_tokens_per_second: float | None  # the tier's capacity, all replicas together
    gpu_seconds_saved_per_second: float | None  # that capacity × t_prefill
    saved_seconds_per_request: float  # GPU time one restore of the tier's part saves
    tail_seconds: float | None  # the p99 a restoring request adds to its TTFT
    beneficial: bool | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "restoreTokensPerSecond": self.restore_tokens_per_second,
            "gpuSecondsSavedPerSecond": self.gpu_seconds_saved_per_second,
            "savedSecondsPerRequest": self.saved_seconds_per_request,
            "tailSeconds": self.tail_seconds,
            "beneficial": self.beneficial,
            "reason": self.reason,
        }


class TierAssessment(Record):
    """Restore-vs-recompute verdict for one disk tier; None where a measurement is missing.

    restore_seconds moves a whole average context at the bandwidth, recompute_seconds is the
    baseline TTFT; the views hold the figures that decide.
    """

    name: str
    selected: bool
    p99_seconds: float | None
    bandwidth_bytes_per_second: int | None
    crossover_tokens: int | None
    restore_blocks_per_second: float | None
    restore_seconds: float | None
    recompute_seconds: float | None
    beneficial: bool | None
    reason: str
    latency: LatencyView | None = None
    throughput: ThroughputView | None = None
    decided_by: str | None = None  # latency | throughput | both

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "selected": self.selected,
            "p99Seconds": self.p99_seconds,
            "bandwidthBytesPerSecond": self.bandwidth_bytes_per_second,
            "crossoverTokens": self.crossover_tokens,
            "restoreBlocksPerSecond": self.restore_blocks_per_second,
            "restoreSeconds": self.restore_seconds,
            "recomputeSeconds": self.recompute_seconds,
            "beneficial": self.beneficial,
            "decidedBy": self.decided_by,
            "reason": self.reason,
            "latency": None if self.latency is None else self.latency.as_dict(),
            "throughput": None if self.throughput is None else self.throughput.as_dict(),
        }


def assess_tier(
    name: str,
    *,
    selected: bool,
    context_tokens: int,
    block_tokens: int,
    block_bytes: int,
    ttft_seconds: float | None,
    p99_seconds: float | None,
    bandwidth: float | None,
    share: float = 1.0,
    bytes_per_token: int | None = None,
    prefill_seconds_per_token: float | None = None,
) -> TierAssessment:
    """Judge restoring from this tier against recomputing, in the latency and throughput views.

    share: the part of an average prefix expected from the tier (`tier_share`; 1 = all of it).
    prefill_seconds_per_token: measured prefill compute time, preferred to TTFT ÷ context.
    """
    per_token = bytes_per_token or block_bytes / block_tokens
    full_restore = (
        bandwidth_restore_seconds(context_tokens, block_tokens, block_bytes, bandwidth)
        if bandwidth
        else None
    )
    unknown = TierAssessment(
        name=name,
        selected=selected,
        p99_seconds=p99_seconds,
        bandwidth_bytes_per_second=None if bandwidth is None else round(bandwidth),
        crossover_tokens=None,
        restore_blocks_per_second=round(bandwidth / block_bytes, 2) if bandwidth else None,
        restore_seconds=round(full_restore, 3) if full_restore is not None else None,
        recompute_seconds=ttft_seconds,
        beneficial=None,
        reason="not measured: give the tier's fio p99 latency and/or bandwidth",
    )
    if prefill_seconds_per_token is not None and prefill_seconds_per_token > 0:
        t_prefill, source = prefill_seconds_per_token, "Measured"
        crossover = math.ceil(p99_seconds / t_prefill) if p99_seconds is not None else None
    elif ttft_seconds is not None:
        t_prefill, source = ttft_seconds / context_tokens, "BaselineTTFT"
        crossover = (
            crossover_tokens(p99_seconds, ttft_seconds, context_tokens)
            if p99_seconds is not None
            else None
        )
    else:
        return replace(
            unknown,
            reason="no baseline TTFT (offload off) or measured prefill time: cannot compare "
            "restore with recompute",
        )
    if p99_seconds is None and not bandwidth:
        return unknown
    part = min(context_tokens, round(context_tokens * max(0.0, share)))
    latency = _latency_view(
        context=context_tokens,
        part=part,
        block_tokens=block_tokens,
        block_bytes=block_bytes,
        t_prefill=t_prefill,
        source=source,
        crossover=crossover,
        p99=p99_seconds,
        bandwidth=bandwidth,
    )
    throughput = _throughput_view(name, part, per_token, t_prefill, p99_seconds, bandwidth)
    beneficial, decided_by, reason = _combine(latency, throughput)
    return replace(
        unknown,
        crossover_tokens=crossover,
        beneficial=beneficial,
        reason=reason,
        latency=latency,
        throughput=throughput,
        decided_by=decided_by,
    )


def _latency_view(
    *,
    context: int,
    part: int,
    block_tokens: int,
    block_bytes: int,
    t_prefill: float,
    source: str,
    crossover: int | None,
    p99: float | None,
    bandwidth: float | None,
) -> LatencyView:
    recompute = part * t_prefill
    restore = (
        (p99 or 0.0) + bandwidth_restore_seconds(part, block_tokens, block_bytes, bandwidth)
        if bandwidth
        else None
    )
    if part == 0:
        return LatencyView(
            prefill_seconds_per_token=t_prefill,
            prefill_source=source,
            crossover_tokens=crossover,
            tier_tokens=0,
            restore_seconds=None,
            recompute_seconds=0.0,
            beneficial=None,
            reason="the CPU tier holds the working set: no part of an average prefix is "
            "expected from this tier",
        )
    checks: list[tuple[bool, str]] = []
    if crossover is not None:
        wins = context > crossover
        checks.append(
            (
                wins,
                f"crossover {crossover:,} tokens (p99 {p99:g} s ÷ prefill "
                f"{t_prefill * 1000:.3g} ms/token) {'<' if wins else '≥'} {context:,}-token "
                "context",
            )
        )
    if restore is not None:
        wins = restore < recompute
        checks.append(
            (
                wins,
                f"restoring the {part:,} tokens of a prefix expected from it takes "
                f"{restore:.3g} s {'<' if wins else '≥'} recomputing them {recompute:.3g} s",
            )
        )
    beneficial = all(ok for ok, _ in checks)
    shown = [text for ok, text in checks if ok == beneficial]
    return LatencyView(
        prefill_seconds_per_token=t_prefill,
        prefill_source=source,
        crossover_tokens=crossover,
        tier_tokens=part,
        restore_seconds=None if restore is None else round(restore, 3),
        recompute_seconds=round(recompute, 3),
        beneficial=beneficial,
        reason="; ".join(shown),
    )


def _throughput_view(
    name: str,
    part: int,
    per_token: float,
    t_prefill: float,
    p99: float | None,
    bandwidth: float | None,
) -> ThroughputView:
    saved = part * t_prefill
    capacity = bandwidth / per_token if bandwidth else None
    gpu_saved = None if capacity is None else capacity * t_prefill
    nothing = ThroughputView(
        restore_tokens_per_second=None if capacity is None else round(capacity, 1),
        gpu_seconds_saved_per_second=None if gpu_saved is None else round(gpu_saved, 3),
        saved_seconds_per_request=round(saved, 3),
        tail_seconds=p99,
        beneficial=None,
        reason="nothing expected to restore",
    )
    if part == 0:
        return nothing
    capacity_text = (
        f"{name} restores up to {capacity:,.0f} tokens/s for all replicas that share it, "
        f"{gpu_saved:.3g} GPU-seconds of prefill saved per second"
        if capacity is not None and gpu_saved is not None
        else f"{name} restores cost no GPU time"
    )
    if p99 is None:
        return replace(nothing, beneficial=True, reason=capacity_text)
    wins = p99 < saved
    tail = (
        f"its p99 {p99:g} s {'<' if wins else '≥'} the {saved:.3g} s of prefill one restore saves"
    )
    return replace(nothing, beneficial=wins, reason=f"{capacity_text}; {tail}" if wins else tail)


def _combine(
    latency: LatencyView, throughput: ThroughputView
) -> tuple[bool | None, str | None, str]:
    lat, thr = latency.beneficial, throughput.beneficial
    if lat is None and thr is None:
        return None, None, latency.reason
    if lat is not False and thr is not False:
        decided = "both" if lat and thr else ("latency" if lat else "throughput")
        reasons = [v.reason for v in (latency, throughput) if v.beneficial]
        return True, decided, "restore wins: " + "; ".join(reasons)
    if lat is False and thr is False:
        return False, "both", f"recompute wins: {latency.reason}; {throughput.reason}"
    if thr:  # one request alone recomputes faster, but the GPUs skip what the tier serves
        return (
            True,
            "throughput",
            f"restore wins under load (throughput view): {throughput.reason}; one request "
            f"on an idle server recomputes faster (latency view): {latency.reason}",
        )
    return (
        None,
        None,
        f"the views disagree, the tier is kept: latency view {latency.reason}; throughput "
        f"view {throughput.reason}",
    )
