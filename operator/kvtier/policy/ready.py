"""Ready: what blocks a KVCacheTier, and what Ready says when nothing does."""

from __future__ import annotations

from collections.abc import Sequence

from kvtier.api.tier import ConditionType, Mode
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.policy.events import READY_APPLIED


def ready_verdict(verdicts: Sequence[Verdict], mode: str) -> Verdict:
    # A tier that loses to recompute is kept with a warning (or dropped): it never blocks.
    failing = [
        v
        for v in verdicts
        if not v.ok
        and v.type not in (ConditionType.TIER_BENEFICIAL, ConditionType.SCHEDULER_SYNCED)
    ]
    sized = any(v.type == ConditionType.SIZED.value and v.ok for v in verdicts)
    if failing:
        first = failing[0]
        return Verdict(ConditionType.READY.value, FALSE, first.reason, first.message)
    if not sized:
        return Verdict(ConditionType.READY.value, FALSE, "NotSized", "sizing has not run")
    if mode == Mode.PLAN:
        return Verdict(
            ConditionType.READY.value,
            TRUE,
            "Planned",
            "Plan mode: sized and reported; nothing applied (see status.plan)",
        )
    return Verdict(
        ConditionType.READY.value,
        TRUE,
        READY_APPLIED,
        "tiers provisioned and applied to the target",
    )
