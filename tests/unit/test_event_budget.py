"""The per-tier Event budget: a burst, then one Event per refill period; and what makes two
Events the same cause."""

from __future__ import annotations

from datetime import UTC, datetime

from kvtier.controller.events import EventBudget, event_key
from kvtier.render.event import event_body


def test_a_burst_then_one_per_refill_period() -> None:
    budget = EventBudget(burst=3, refill_seconds=10.0)
    tier = ("ns", "t")
    assert [budget.allow(tier, 0.0) for _ in range(4)] == [True, True, True, False]
    assert not budget.allow(tier, 9.0)  # 0.9 of a token back
    assert budget.allow(tier, 10.5)  # a whole one
    assert not budget.allow(tier, 11.0)
    assert budget.allow(("ns", "other"), 11.0)  # budgets are per tier


def test_an_idle_tier_refills_to_the_burst_only() -> None:
    budget = EventBudget(burst=2, refill_seconds=1.0)
    tier = ("ns", "t")
    assert budget.allow(tier, 0.0) and budget.allow(tier, 0.0)
    assert [budget.allow(tier, 1000.0) for _ in range(3)] == [True, True, False]


def test_a_deleted_tier_starts_afresh() -> None:
    budget = EventBudget(burst=1, refill_seconds=300.0)
    tier = ("ns", "t")
    assert budget.allow(tier, 0.0) and not budget.allow(tier, 1.0)
    budget.forget(tier)
    assert budget.allow(tier, 2.0)


def test_a_cause_is_the_object_type_reason_and_message_not_its_version() -> None:
    """As client-go's getEventKey: a repeat about a newer resourceVersion of the same tier is
    the same cause (counted on its Event); another message or another tier (uid) is not."""
    now = datetime(2026, 12, 2, tzinfo=UTC)

    def tier(uid: str, version: str) -> dict[str, object]:
        return {
            "metadata": {"namespace": "ns", "name": "t", "uid": uid, "resourceVersion": version}
        }

    first = event_body(tier("u1", "7"), "Warning", "TargetNotFound", "m", "pod-a", now)
    again = event_body(tier("u1", "9"), "Warning", "TargetNotFound", "m", "pod-b", now)
    assert event_key(first) == event_key(again)
    for other in (
        event_body(tier("u1", "7"), "Warning", "TargetNotFound", "other", "pod-a", now),
        event_body(tier("u2", "7"), "Warning", "TargetNotFound", "m", "pod-a", now),
        event_body(tier("u1", "7"), "Normal", "TargetNotFound", "m", "pod-a", now),
    ):
        assert event_key(other) != event_key(first)
