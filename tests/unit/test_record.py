"""kvtier.sizing.record.Record behaves as dataclasses.dataclass(frozen=True) on every class
shape the sizing engine uses: fields with and without defaults, inheritance, construction
by position and keyword (and its errors), equality, hashing, repr, immutability, replace()."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.sizing import record
from kvtier.sizing.record import FrozenRecordError, Record, field_defaults

NAMES = ("a", "b", "c", "d", "e", "f")
VALUES = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.tuples(st.integers(0, 3)))

# A shape: field names in order, the first `required` of them without a default.
Shape = tuple[tuple[str, ...], int, tuple[Any, ...]]


@st.composite
def shapes(draw: st.DrawFn, names: tuple[str, ...] = NAMES) -> Shape:
    fields = tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=5)))
    required = draw(st.integers(0, len(fields)))
    defaults = tuple(draw(VALUES) for _ in fields[required:])
    return fields, required, defaults


def as_record(shape: Shape, base: type = Record, name: str = "Point") -> type:
    fields, required, defaults = shape
    namespace: dict[str, Any] = {"__annotations__": dict.fromkeys(fields, "object")}
    namespace.update(zip(fields[required:], defaults, strict=True))
    return type(name, (base,), namespace)


def as_dataclass(shape: Shape, base: type = object, name: str = "Point") -> type:
    fields, required, defaults = shape
    spec: list[Any] = [(n, "object") for n in fields[:required]]
    spec += [
        (n, "object", dataclasses.field(default=d))
        for n, d in zip(fields[required:], defaults, strict=True)
    ]
    return dataclasses.make_dataclass(name, spec, bases=(base,), frozen=True)


def outcome(build: Any, *args: Any, **kwargs: Any) -> Any:
    """What a call gives: its fields' values, or the type of the error it raised."""
    try:
        made = build(*args, **kwargs)
    except Exception as exc:  # the error's type is the result compared
        return type(exc)
    return made


def values(obj: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(getattr(obj, n) for n in names)


CALLS = st.tuples(
    st.lists(VALUES, max_size=6),
    st.dictionaries(st.sampled_from((*NAMES, "zz")), VALUES, max_size=4),
)


@given(shapes(), CALLS)
def test_construction_matches_dataclasses(shape: Shape, call: Any) -> None:
    args, kwargs = call
    mine = outcome(as_record(shape), *args, **kwargs)
    theirs = outcome(as_dataclass(shape), *args, **kwargs)
    if isinstance(theirs, type):
        assert mine is theirs  # TypeError for too many, missing, duplicate or unknown
        return
    assert not isinstance(mine, type), mine
    assert values(mine, shape[0]) == values(theirs, shape[0])
    assert repr(mine) == repr(theirs)


@given(shapes(), st.lists(VALUES, min_size=6, max_size=6), st.lists(VALUES, min_size=6))
def test_equality_hash_and_replace_match_dataclasses(
    shape: Shape, first: list[Any], second: list[Any]
) -> None:
    fields = shape[0]
    mine, theirs = as_record(shape), as_dataclass(shape)
    x, y = first[: len(fields)], second[: len(fields)]
    assert (mine(*x) == mine(*y)) == (theirs(*x) == theirs(*y))
    assert (hash(mine(*x)) == hash(mine(*x))) and mine(*x) == mine(*x)
    assert mine(*x) != theirs(*x)  # another class, as between two dataclasses
    changes = dict(zip(fields[::2], y, strict=False))
    assert values(record.replace(mine(*x), **changes), fields) == values(
        dataclasses.replace(theirs(*x), **changes), fields
    )


@given(shapes())
def test_unknown_field_in_replace_is_a_type_error(shape: Shape) -> None:
    made = as_record(shape)(*range(len(shape[0])))
    with pytest.raises(TypeError, match="no field 'zz'"):
        record.replace(made, zz=1)


@given(shapes(), shapes(names=("c", "d", "g", "h")))
def test_inherited_fields_come_first_as_in_dataclasses(base: Shape, child: Shape) -> None:
    def both(make: Any, root: type) -> Any:
        parent = outcome(make, base, root, "Base")
        if isinstance(parent, type) and issubclass(parent, Exception):
            return parent
        return outcome(make, child, parent, "Child")

    mine, theirs = both(as_record, Record), both(as_dataclass, object)
    if isinstance(theirs, type) and issubclass(theirs, Exception):
        assert mine is theirs
        return
    order = [f.name for f in dataclasses.fields(theirs)]
    assert [name for name, _ in mine._record_fields] == order
    assert field_defaults(mine) == {
        f.name: f.default
        for f in dataclasses.fields(theirs)
        if f.default is not dataclasses.MISSING
    }


def test_assignment_and_deletion_are_refused() -> None:
    made = as_record((("a",), 1, ()))(1)
    with pytest.raises(FrozenRecordError, match="'a'"):
        made.a = 2
    with pytest.raises(FrozenRecordError):
        del made.a
    with pytest.raises(AttributeError):  # as dataclasses.FrozenInstanceError is one
        made.new = 1
    assert made.a == 1


@pytest.mark.parametrize("default", [[], {}, set()])
def test_mutable_defaults_are_refused_as_by_dataclasses(default: Any) -> None:
    with pytest.raises(ValueError, match="mutable default"):
        as_record((("a",), 0, (default,)))
    with pytest.raises(ValueError, match="mutable default"):
        as_dataclass((("a",), 0, (default,)))
    assert as_record((("a",), 0, (MappingProxyType({}),)))().a == {}


def test_post_init_runs_once_the_fields_are_set() -> None:
    class Positive(Record):
        n: int
        doubled: int = 0

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("n must be >= 0")

    assert Positive(2).n == 2
    with pytest.raises(ValueError, match="n must be >= 0"):
        Positive(-1)
    with pytest.raises(ValueError, match="n must be >= 0"):
        record.replace(Positive(1), n=-3)


def test_class_variables_are_not_fields() -> None:
    class Counted(Record):
        limit: ClassVar[int] = 3
        n: int

    assert Counted(1).n == 1 and [n for n, _ in Counted._record_fields] == ["n"]
    with pytest.raises(TypeError):
        Counted(1, 2)  # type: ignore[call-arg]
