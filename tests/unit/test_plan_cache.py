"""A sizing plan is worked out once per input: the same object for an equal input, a new one
for any changed field (the measured tier figures, a mapping, among them), never a kept error."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from kvtier.policy import plan_cache
from kvtier.policy.plan_cache import planned
from kvtier.sizing import SizingError, SizingInput, lookup_model, plan, record


def _input(**changes: object) -> SizingInput:
    base = SizingInput(
        geometry=lookup_model("llama-3.1-70b"),
        average_context_tokens=50000,
        concurrent_sessions=64,
        tensor_parallel_size=8,
        node_memory_bytes=2 * 1024**4,
    )
    return record.replace(base, **changes)


def test_an_equal_input_gets_the_same_plan_and_it_is_sizings_own() -> None:
    first = planned(_input())
    assert planned(_input()) is first  # an equal input, not the same object
    assert first == plan(_input())


@pytest.mark.parametrize(
    "changes",
    [
        {"concurrent_sessions": 65},
        {"tier_p99_seconds": MappingProxyType({"NVMe": 0.004})},
        {"tier_p99_seconds": MappingProxyType({"NVMe": 0.005})},
        {"available_disk_types": frozenset({"CephFS"})},
    ],
)
def test_any_changed_field_is_planned_afresh(changes: dict[str, object]) -> None:
    changed = _input(**changes)
    assert planned(changed) == plan(changed)
    assert planned(changed) != planned(_input())


def test_errors_are_not_kept() -> None:
    bad = _input(cpu_bytes=1)  # below one block: refused
    with pytest.raises(SizingError):
        plan(bad)
    for _ in range(2):
        with pytest.raises(SizingError):
            planned(bad)
    assert all(v is not None for v in plan_cache._PLANS.values())


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_cache, "_PLANS", {})
    monkeypatch.setattr(plan_cache, "PLANS_KEPT", 3)
    for sessions in range(1, 6):
        planned(_input(concurrent_sessions=sessions))
    assert len(plan_cache._PLANS) == 3
