"""The policy's re-probing schedule: the rule admission checks (the CRD's CEL expression) and
the operator's own check of a schedule stored before that rule, which puts a condition on the
policy instead of silently never re-probing."""

from __future__ import annotations

import re

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.api.policy import CRON_SCHEDULE
from kvtier.generate import crd_documents
from kvtier.policy.conditions import FALSE, TRUE
from kvtier.policy.parse_cache import parse
from kvtier.policy.policy_ready import policy_ready
from kvtier.policy.probing import schedule_problem

BAD = {
    "61 25 * * *": "the minute field '61' is not within 0-59",
    "0 25 * * *": "the hour field '25' is not within 0-23",
    "0 0 32 * *": "the day of month field '32' is not within 1-31",
    "0 0 0 * *": "the day of month field '0' is not within 1-31",
    "0 0 * 13 *": "the month field '13' is not within 1-12 or jan-dec",
    "0 0 * * 8": "the day of week field '8' is not within 0-7 or sun-sat",
    "*/0 * * * *": "the minute field '*/0' is not within 0-59",
    "every day at noon please": "the minute field 'every' is not within 0-59",
    "garbage": "1 field(s), not a cron schedule",
    "0 0 31 2 *": "it never fires",
}
WORKLOAD = {"averageContextTokens": 50000, "concurrentSessions": 64}
GOOD = [
    "@daily",
    "@midnight",
    "*/15 2 * * MON-FRI",
    "0 3 1,15 * *",
    "30 4 * jan-mar sun",
    "0 0 ? * 7",
]


@pytest.mark.parametrize("schedule", sorted(BAD))
def test_a_bad_schedule_is_named_with_the_rule_it_breaks(schedule: str) -> None:
    problem = schedule_problem(schedule)
    assert problem is not None and problem.startswith(BAD[schedule]), problem


@pytest.mark.parametrize("schedule", GOOD)
def test_good_schedules_pass_both_checks(schedule: str) -> None:
    assert re.fullmatch(CRON_SCHEDULE, schedule)
    assert schedule_problem(schedule) is None


def test_the_admission_rule_refuses_what_is_out_of_range() -> None:
    for schedule in BAD:
        if schedule != "0 0 31 2 *":  # a valid shape; only running it shows it never fires
            assert not re.fullmatch(CRON_SCHEDULE, schedule), schedule


@settings(max_examples=300, deadline=None)
@given(st.from_regex(CRON_SCHEDULE, fullmatch=True))
def test_whatever_admission_admits_croniter_runs(schedule: str) -> None:
    """The operator runs the schedule with croniter: nothing the CRD admits may fail there
    (a date that never comes, such as February 31st, is the condition's to tell)."""
    if croniter.is_valid(schedule):
        return
    pytest.fail(f"admitted but croniter refuses {schedule!r}")


def test_the_crd_carries_the_rule_on_spec_probing() -> None:
    spec = crd_documents()["KVCachePolicy"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    probing = spec["properties"]["spec"]["properties"]["probing"]
    [rule] = probing["x-kubernetes-validations"]
    assert rule["rule"] == f"!has(self.schedule) || self.schedule.matches('{CRON_SCHEDULE}')"
    assert rule["fieldPath"] == ".schedule"
    assert "minute 0-59, hour 0-23" in rule["message"]


def test_a_stored_bad_schedule_is_a_condition_on_the_policy_only() -> None:
    """Stored before admission checked it: the policy says why re-probing is off, and tiers
    keep following the rest of the policy (it still parses)."""
    spec = {"probing": {"schedule": "61 25 * * *"}, "memory": {"maxNodeFraction": 0.5}}
    ready = policy_ready(spec, None)
    assert (ready.status, ready.reason) == (FALSE, "InvalidProbingSchedule")
    assert ready.message.startswith("spec.probing.schedule '61 25 * * *': the minute field")
    assert "minute 0-59" in ready.message and "not re-probed" in ready.message
    tier = {"targetRef": {"kind": "InferenceService", "name": "x"}, "workload": WORKLOAD}
    parsed = parse(tier, spec)
    assert parsed.policy_error is None and parsed.policy is not None
    assert policy_ready({"probing": {"schedule": "@weekly"}}, None).status == TRUE


def test_leap_days_and_no_schedule_are_fine() -> None:
    assert schedule_problem("0 0 29 2 *") is None  # leap days come
    assert schedule_problem(None) is None
