"""The per-tier Event budget: a burst, then one Event per refill period."""

from __future__ import annotations

from kvtier.controller.events import EventBudget


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
