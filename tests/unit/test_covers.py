"""provisioning.covers, the check that an object already holds a write, against its plain
definition: the fast paths (a dict's check first, items matched by name) change no answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kvtier.policy.provisioning import _same_leaf, covers


def plain_covers(current: Any, desired: Any) -> bool:
    """covers as first written: a Mapping's check for every value, every item of a list of
    objects against every item."""
    if isinstance(desired, Mapping):
        by_index = bool(desired) and all(str(k).isdigit() for k in desired)
        if by_index and isinstance(current, list):
            return all(
                int(k) < len(current) and plain_covers(current[int(k)], v)
                for k, v in desired.items()
            )
        if not isinstance(current, Mapping):
            return False
        return all(k in current and plain_covers(current[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(current, list):
            return False
        if all(isinstance(d, Mapping) for d in desired):
            return all(any(plain_covers(c, d) for c in current) for d in desired)
        return current == desired
    return _same_leaf(current, desired)  # a leaf: compared as before, the shortcuts are above


# Names and values where the shortcuts could go wrong: quantities equal in amount ("1k",
# "1000"), a number and its text, an index-like key.
LEAVES = st.sampled_from(["vllm", "kv", "1k", "1000", "1Ki", "1024", "0", 0, 1000, 1.0, True, None])
KEYS = st.sampled_from(["name", "value", "args", "env", "0", "1", "mountPath"])


def values(depth: int = 3) -> st.SearchStrategy[Any]:
    return st.recursive(
        LEAVES,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(KEYS, inner, max_size=4),
            st.lists(st.dictionaries(KEYS, inner, min_size=1, max_size=3), max_size=4),
        ),
        max_leaves=12,
    )


@given(values(), values())
def test_covers_answers_as_its_plain_definition(current: Any, desired: Any) -> None:
    assert covers(current, desired) is plain_covers(current, desired)


@given(values())
def test_an_object_covers_itself(value: Any) -> None:
    assert covers(value, value)


def test_items_are_matched_by_name_in_any_order() -> None:
    current = [{"name": "b", "value": "2"}, {"name": "a", "value": "1", "extra": "x"}]
    assert covers(current, [{"name": "a", "value": "1"}, {"name": "b"}])
    assert not covers(current, [{"name": "a", "value": "2"}])
    assert not covers(current, [{"name": "c"}])
    # A quantity's name is the same amount in another spelling: still covered.
    assert covers([{"name": "1000"}], [{"name": "1k"}])
