"""The status merge patch: applied as the API server applies a JSON merge patch (RFC 7386),
it turns the stored status into the decided one at every depth, and is None when nothing
would change."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kvtier.policy.stored import STATUS_KEYS, prune, status_patch


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, section 2: MergePatch(Target, Patch)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


leaves = st.one_of(st.integers(-3, 3), st.text("ab", max_size=2), st.booleans(), st.none())
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)
    ),
    max_leaves=12,
)
statuses = st.dictionaries(st.sampled_from((*STATUS_KEYS[:4], "plan", "sizing")), values)


@given(statuses, statuses)
def test_the_patch_turns_the_stored_status_into_the_decided_one(
    stored: dict[str, Any], desired: dict[str, Any]
) -> None:
    stored = prune(stored)
    patch = status_patch(stored, desired)
    if patch is None:
        assert stored == prune({k: v for k, v in desired.items() if v is not None})
    else:
        assert merge_patch(stored, patch) == prune(desired)


def test_a_key_gone_from_a_nested_map_is_removed() -> None:
    """A tier whose router config went: `plan.scheduler` must go too (a merge patch that only
    leaves it out keeps it, and the same patch would be sent on every pass)."""
    stored = {"plan": {"summary": "s", "scheduler": {"plugin": "p"}}, "mode": "Apply"}
    desired = {"plan": {"summary": "s", "scheduler": None}, "mode": "Apply"}
    patch = status_patch(stored, desired)
    assert patch == {"plan": {"scheduler": None}}
    assert status_patch(merge_patch(stored, patch), desired) is None


def test_nothing_to_change_is_no_patch() -> None:
    stored = {"plan": {"summary": "s"}, "conditions": [{"type": "Ready"}], "other": 1}
    assert (
        status_patch(stored, {"plan": {"summary": "s"}, "conditions": [{"type": "Ready"}]}) is None
    )
