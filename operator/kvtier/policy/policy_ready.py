"""The KVCachePolicy's Ready condition: the policy validates, its re-probing schedule is one
cron runs, and what it asks the cluster for (today: the replica-1 pool) is there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kvtier.api.policy import KVCachePolicySpec
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.policy.probing import schedule_problem

READY = "Ready"
READY_ACCEPTED = "Accepted"
READY_INVALID = "PolicyInvalid"
READY_BAD_SCHEDULE = "InvalidProbingSchedule"


def policy_ready(spec: Mapping[str, Any] | None, replica1: Verdict | None) -> Verdict:
    """Ready True when the spec validates, its probing schedule runs and the replica-1 pool
    (if asked for) is ready; else False with the first problem's reason and message."""
    try:
        parsed = KVCachePolicySpec.model_validate(spec or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        return Verdict(
            READY,
            FALSE,
            READY_INVALID,
            f"spec.{where}: {first['msg']}; KVCacheTiers use the built-in defaults",
        )
    schedule = parsed.probing.schedule if parsed.probing else None
    problem = schedule_problem(schedule)
    if problem is not None:
        # Admission refuses such a schedule; one stored before the rule would silently never
        # re-probe. Only re-probing stops: tiers follow the rest of the policy.
        return Verdict(
            READY,
            FALSE,
            READY_BAD_SCHEDULE,
            f"spec.probing.schedule {schedule!r}: {problem}; tiers are not re-probed until it "
            "is fixed, and follow the rest of the policy",
        )
    if replica1 is not None and not replica1.ok:
        return Verdict(READY, FALSE, replica1.reason, replica1.message)
    return Verdict(READY, TRUE, READY_ACCEPTED, "the policy is valid; KVCacheTiers follow it")
