"""Sizing plans worked out once per input: a tier is decided twice per Apply reconcile (before
its writes and from their answers), and tiers of the same model and workload size alike."""

from __future__ import annotations

from collections.abc import Mapping

from kvtier.sizing import SizingInput, SizingPlan, plan, record

_PLANS: dict[tuple[object, ...], SizingPlan] = {}
PLANS_KEPT = 1024


# Field values that are keys as they are, checked before Mapping (whose isinstance costs more).
_PLAIN = (str, int, float, type(None), frozenset, tuple)


def _key(inp: SizingInput) -> tuple[object, ...]:
    return tuple(
        v if isinstance(v, _PLAIN) or not isinstance(v, Mapping) else tuple(sorted(v.items()))
        for v in record.field_values(inp)
    )


def planned(inp: SizingInput) -> SizingPlan:
    """`sizing.plan(inp)`, the same object for an equal input (a SizingPlan is frozen)."""
    key = _key(inp)
    hit = _PLANS.get(key)
    if hit is None:
        hit = plan(inp)  # a SizingError is raised each time: only plans are kept
        if len(_PLANS) >= PLANS_KEPT:
            del _PLANS[next(iter(_PLANS))]  # the oldest
        _PLANS[key] = hit
    return hit
