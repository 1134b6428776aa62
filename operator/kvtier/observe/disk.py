"""DiskPressure: how full a disk tier is, from its evictor's own gauges (pure).

`kvtier evict` exports the tier's used bytes, capacity, usage ratio, high watermark and
whether it was still above the watermark after its last pass. Two snapshots a window apart
decide: True when the fullest evictor stayed above its high watermark at both ends of the
window (eviction cannot keep up, or every file is protected), False when it is below.
An NVMe tier has one evictor per model-server pod (one volume each), a CephFS tier one
Deployment for the shared claim: either way the fullest pod speaks for the tier.
Hysteresis as for TierEffective: a tier under pressure must fall below the watermark by
`margin` to clear, and a status flips only after `confirmations` evaluations agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.api.observation import DiskObservation, EffectiveState
from kvtier.observe.series import Snapshot
from kvtier.observe.verdict import Thresholds, Verdict, settle

# The evictor's gauges (kvtier.evict.metrics defines them; a unit test keeps these in step).
USED = "kvtier_evict_used_bytes"
CAPACITY = "kvtier_evict_capacity_bytes"
USAGE = "kvtier_evict_usage_ratio"
HIGH = "kvtier_evict_high_watermark_ratio"
ABOVE_HIGH = "kvtier_evict_above_high_watermark"
READ: tuple[str, ...] = (USED, CAPACITY, USAGE, HIGH, ABOVE_HIGH)

CONDITION = "DiskPressure"
REASON_ABOVE = "AboveHighWatermark"
REASON_BRIEFLY_ABOVE = "BrieflyAboveHighWatermark"
REASON_BELOW = "BelowHighWatermark"
REASON_UNAVAILABLE = "EvictorMetricsUnavailable"


@dataclass(frozen=True)
class DiskReading:
    """One evictor's gauges at one instant."""

    pod: str
    used_bytes: float
    capacity_bytes: float | None
    usage: float
    high: float
    above_high: bool

    def above(self, margin: float) -> bool:
        """At or above the high watermark less `margin` (relative); the evictor's own flag
        counts only without the margin, as it knows no band."""
        return self.usage >= self.high * (1 - margin) or (margin == 0 and self.above_high)


def readings(snap: Snapshot) -> dict[str, DiskReading]:
    """Per pod, the evictors that have walked their tier: the high watermark is set by the
    first pass that acts (a standby evictor, or one yet to run, exports zeros)."""
    by_pod: dict[str, dict[str, float]] = {}
    for key, value in snap.values.items():
        if key.name in READ:
            by_pod.setdefault(key.pod, {})[key.name] = value
    return {
        pod: DiskReading(
            pod=pod,
            used_bytes=v.get(USED, 0.0),
            capacity_bytes=v.get(CAPACITY) or None,
            usage=v.get(USAGE, 0.0),
            high=v[HIGH],
            above_high=v.get(ABOVE_HIGH, 0.0) >= 1,
        )
        for pod, v in sorted(by_pod.items())
        if v.get(HIGH)
    }


def _fullest(found: dict[str, DiskReading]) -> DiskReading:
    return max(found.values(), key=lambda r: (r.usage, r.used_bytes, r.pod))


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _figures(r: DiskReading) -> str:
    capacity = "" if r.capacity_bytes is None else f" of {_gib(r.capacity_bytes)}"
    return (
        f"pod {r.pod}: {_gib(r.used_bytes)}{capacity} used "
        f"({r.usage:.0%}, high watermark {r.high:.0%})"
    )


def judge(
    before: Snapshot | None,
    after: Snapshot,
    window_seconds: float,
    th: Thresholds,
    previous: EffectiveState | None,
) -> tuple[Verdict, DiskReading | None]:
    """This window's verdict, and the fullest evictor's reading at its end."""
    now = readings(after)
    if not now:
        return unavailable("no evictor reported its tier's usage yet"), None
    margin = th.margin if previous is not None and previous.reason == REASON_ABOVE else 0.0
    fullest = _fullest(now)
    then = readings(before) if before is not None else {}
    stayed = [
        r for pod, r in now.items() if r.above(margin) and pod in then and then[pod].above(margin)
    ]
    if stayed:
        worst = _fullest({r.pod: r for r in stayed})
        return Verdict(
            "True",
            REASON_ABOVE,
            f"{_figures(worst)}: above the high watermark for {window_seconds:.0f} s; "
            "eviction does not keep up or the files are protected",
        ), worst
    if fullest.above(margin):
        return Verdict(
            "False",
            REASON_BRIEFLY_ABOVE,
            f"{_figures(fullest)}: above the high watermark for less than "
            f"{window_seconds:.0f} s; the evictor's next passes should bring it down",
        ), fullest
    band = f" less a {margin:.0%} margin" if margin else ""
    return Verdict(
        "False", REASON_BELOW, f"{_figures(fullest)}: below the high watermark{band}"
    ), fullest


def unavailable(message: str) -> Verdict:
    return Verdict("Unknown", REASON_UNAVAILABLE, message)


def evaluate(
    tier: str,
    before: Snapshot | None,
    after: Snapshot,
    window_seconds: float,
    th: Thresholds,
    previous: EffectiveState | None,
) -> DiskObservation:
    verdict, reading = judge(before, after, window_seconds, th, previous)
    state = settle(verdict, previous, th)
    if reading is None:
        return DiskObservation(tier, state)
    capacity = None if reading.capacity_bytes is None else int(reading.capacity_bytes)
    return DiskObservation(tier, state, int(reading.used_bytes), capacity)


def failed(tier: str, message: str) -> DiskObservation:
    """A read that failed: Unknown at once, as for TierEffective."""
    verdict = unavailable(message)
    return DiskObservation(tier, EffectiveState(verdict.status, verdict.reason, verdict.message))
