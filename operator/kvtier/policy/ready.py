"""Ready: the first blocker of a KVCacheTier in one documented order, and what Ready says
when nothing blocks.

docs/troubleshooting.md ("Ready") documents PRECEDENCE; tests/unit/test_ready.py checks the
page against it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtier.api.tier import ConditionType, Mode
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.policy.events import READY_APPLIED

# The refusals come first: a tier kvtier will not act on is blocked by that, not by the writes
# it holds back for it. Then the steps of a reconcile in the order they happen.
REFUSALS: tuple[ConditionType, ...] = (
    ConditionType.CONFLICT,
    ConditionType.POLICY_COMPLIANT,
    ConditionType.TARGET_FOUND,
    ConditionType.SIZED,
)
# What Apply mode does once nothing refuses the tier: held back while something does.
HELD_BACK: tuple[ConditionType, ...] = (
    ConditionType.PROVISIONED,
    ConditionType.APPLIED,
    ConditionType.PROBED,
)
PRECEDENCE: tuple[ConditionType, ...] = (*REFUSALS, *HELD_BACK)
# Never block Ready: a tier that loses to recompute is kept with a warning (or dropped), the
# router's view of the CPU tier and the observed health are reports, not steps.
NEVER_BLOCK: tuple[ConditionType, ...] = (
    ConditionType.TIER_BENEFICIAL,
    ConditionType.SCHEDULER_SYNCED,
    ConditionType.TIER_EFFECTIVE,
    ConditionType.DISK_PRESSURE,
)
# Named *_REASON so tests/unit/test_troubleshooting_doc.py reads them as reasons.
BLOCKED_REASON = "Blocked"
NOT_SIZED_REASON = "NotSized"
PLANNED_REASON = "Planned"


def _by_type(verdicts: Sequence[Verdict]) -> dict[str, Verdict]:
    found: dict[str, Verdict] = {}
    for v in verdicts:
        found.setdefault(v.type, v)
    return found


def _not_sized() -> Verdict:
    return Verdict(ConditionType.SIZED.value, FALSE, NOT_SIZED_REASON, "sizing has not run")


def first_blocker(
    verdicts: Sequence[Verdict], order: Sequence[ConditionType] = PRECEDENCE
) -> Verdict | None:
    """The first condition of `order` that is not fine; a missing Sized counts as one (the
    sizing has not run), any other missing condition does not apply to the tier."""
    found = _by_type(verdicts)
    for ctype in order:
        v = found.get(ctype.value)
        if v is None and ctype is ConditionType.SIZED:
            return _not_sized()
        if v is not None and not v.ok:
            return v
    return None


def refusal(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The first refusal: while there is one, kvtier writes nothing and probes nothing."""
    found = _by_type(verdicts)
    return next((found[c] for c in REFUSALS if c in found and not found[c].ok), None)


def blocked(ctype: ConditionType, by: Verdict) -> Verdict:
    """`ctype` held back by the refusal `by`: said as such, not as work in progress."""
    what = {
        ConditionType.PROVISIONED: "nothing is provisioned",
        ConditionType.APPLIED: "nothing is applied",
        ConditionType.PROBED: "nothing is probed",
    }.get(ctype, "nothing is done")
    return Verdict(
        ctype.value,
        FALSE,
        BLOCKED_REASON,
        f"{what} while {by.type} is {by.status} ({by.reason}); kvtier writes nothing for "
        "this tier until that is resolved",
    )


def hold_back(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts of a refused tier: each Provisioned, Applied and Probed that is not fine
    says Blocked (a tier kvtier writes nothing for is not "waiting for" its storage, patch or
    probe); those that are fine keep saying what the cluster shows."""
    by = refusal(verdicts)
    if by is None:
        return list(verdicts)
    held = {c.value: c for c in HELD_BACK}
    return [
        blocked(held[v.type], by)
        if v.type in held and not v.ok and v.reason != BLOCKED_REASON
        else v
        for v in verdicts
    ]


def ready_verdict(verdicts: Sequence[Verdict], mode: str) -> Verdict:
    """Ready: the reason and message of the first blocker in PRECEDENCE, else Planned or
    Applied by the mode. Conditions not in PRECEDENCE (NEVER_BLOCK) are not read."""
    first = first_blocker(verdicts)
    if first is not None:
        return Verdict(ConditionType.READY.value, FALSE, first.reason, first.message)
    if mode == Mode.PLAN:
        return Verdict(
            ConditionType.READY.value,
            TRUE,
            PLANNED_REASON,
            "Plan mode: sized and reported; nothing applied (see status.plan)",
        )
    return Verdict(
        ConditionType.READY.value,
        TRUE,
        READY_APPLIED,
        "tiers provisioned and applied to the target",
    )
