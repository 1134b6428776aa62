"""The merge shape kept of a served schema judges every apply as the whole schema does: on the
real CRDs of the kinds kvtier writes (KServe's full and minimal, LWS's) and on Kubernetes'
own Deployment, every path the whole schema declares has the same list and map types in the
shape, and random bodies against random live objects name the same replaced parts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.render.served_schema import (
    LIST_KEYS,
    LIST_TYPE,
    MAP_TYPE,
    merge_shape,
    replaced_parts,
    resolve,
)
from tests.served_schemas import kind_document

KINDS = [
    ("serving.kserve.io/v1beta1", "InferenceService", "full"),
    ("serving.kserve.io/v1beta1", "InferenceService", "minimal"),
    ("serving.kserve.io/v1alpha1", "LLMInferenceService", "full"),
    ("serving.kserve.io/v1alpha2", "LLMInferenceService", "full"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "full"),
    ("apps/v1", "Deployment", "builtin"),
]
IDS = [f"{k}-{v.rsplit('/', 1)[1]}-{variant}" for v, k, variant in KINDS]


@cache
def whole(api_version: str, kind: str, variant: str) -> dict[str, Any]:
    """The resolved schema, all of it (descriptions aside)."""
    schemas = kind_document(api_version, kind, variant)["components"]["schemas"]
    group, _, version = api_version.rpartition("/")
    for schema in schemas.values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (
                group,
                version,
                kind,
            ):
                return resolve(schemas, schema)
    raise KeyError(kind)


def _child(node: Mapping[str, Any] | None, step: str) -> Mapping[str, Any] | None:
    """One step down as replaced_parts takes it ("[]": into a list's items)."""
    if node is None:
        return None
    if step == "[]":
        found = node.get("items")
    else:
        props = node.get("properties")
        declared = isinstance(props, Mapping) and step in props
        found = props[step] if declared else node.get("additionalProperties")
    return found if isinstance(found, Mapping) else None


def _merge(node: Mapping[str, Any] | None) -> tuple[bool, str | None, Any]:
    """How replaced_parts merges a map and a list at this node."""
    kind = node.get(LIST_TYPE) if node else None
    listed = kind if kind in ("map", "set") else None  # atomic, or no type: replaced whole
    keys = node.get(LIST_KEYS) if node and listed == "map" else None
    return (bool(node and node.get(MAP_TYPE) == "atomic"), listed, keys)


def _paths(node: Mapping[str, Any], depth: int = 0) -> Iterator[tuple[str, ...]]:
    """Every path into `node` that replaced_parts may look at."""
    yield ()
    if depth > 14:
        return
    atomic_map, listed, _ = _merge(node)
    steps = [] if atomic_map else [*(node.get("properties") or {}), "undeclared-key"]
    steps += ["[]"] if listed == "map" else []
    for step in steps:
        child = _child(node, step)
        if child is not None:
            for rest in _paths(child, depth + 1):
                yield (step, *rest)


def _at(node: Mapping[str, Any] | None, path: tuple[str, ...]) -> Mapping[str, Any] | None:
    for step in path:
        node = _child(node, step)
    return node


@pytest.mark.parametrize(("api_version", "kind", "variant"), KINDS, ids=IDS)
def test_every_declared_path_merges_alike(api_version: str, kind: str, variant: str) -> None:
    full = whole(api_version, kind, variant)
    shape = merge_shape(full)
    marked = 0
    for path in _paths(full):
        expected = _merge(_at(full, path))
        assert _merge(_at(shape, path)) == expected, path
        marked += expected != (False, None, None)
    if variant != "minimal":
        assert marked > 0  # the check saw list and map types, not only empty schemas


@pytest.mark.parametrize(("api_version", "kind", "variant"), KINDS, ids=IDS)
def test_the_shape_is_a_small_part_of_the_schema(api_version: str, kind: str, variant: str) -> None:
    full = whole(api_version, kind, variant)
    ratio = 4 if variant == "minimal" else 10  # the minimal CRD is a few fields
    assert len(repr(merge_shape(full))) * ratio < len(repr(full))


def _value(draw: st.DrawFn, node: Mapping[str, Any] | None, depth: int) -> Any:
    """A value at a schema node: the node's declared fields and items, an undeclared key now
    and then, a keyed list's keys; a leaf past the depth."""
    if depth > 9 or node is None or draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([1, "a", ["a"], {"k": "v"}, [{"name": "n"}], None]))
    props = list(node.get("properties") or {})
    if "items" in node or node.get(LIST_TYPE):
        keys = list(node.get(LIST_KEYS) or [])
        items = []
        for _ in range(draw(st.integers(0, 2))):
            item = _value(draw, _child(node, "[]"), depth + 1)
            if keys:
                item = item if isinstance(item, dict) else {}
                item.update({k: draw(st.sampled_from(["x", "y"])) for k in keys})
            items.append(item)
        return items
    # Mostly the properties on the way to a keyed list, a set or an atomic map.
    marked = [p for p in props if merge_shape(_child(node, p) or {})] * 8
    names = draw(
        st.lists(st.sampled_from([*marked, *props, "undeclared-key"]), max_size=3, unique=True)
    )
    return {name: _value(draw, _child(node, name), depth + 1) for name in names}


def _changed(draw: st.DrawFn, value: Any) -> Any:
    """`value` with some leaves changed and some lists grown: a live object that holds the
    same parts as a body with other contents in places."""
    if isinstance(value, dict):
        return {k: _changed(draw, v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_changed(draw, v) for v in value]
        return [*items, "extra"] if draw(st.booleans()) else items
    return f"{value}-live" if draw(st.booleans()) else value


@st.composite
def _body_and_live(draw: st.DrawFn, schema: Mapping[str, Any]) -> tuple[Any, Any]:
    body = _value(draw, schema, 0)
    body = body if isinstance(body, dict) else {}
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return body, None
    if choice == 1:
        return body, _changed(draw, body)
    live = body if choice == 2 else _value(draw, schema, 0)
    return body, live if isinstance(live, dict) else None


@pytest.mark.parametrize(("api_version", "kind", "variant"), KINDS, ids=IDS)
@settings(max_examples=40)
@given(data=st.data())
def test_random_applies_name_the_same_parts(
    api_version: str, kind: str, variant: str, data: st.DataObject
) -> None:
    full = whole(api_version, kind, variant)
    body, live = data.draw(_body_and_live(full))
    assert replaced_parts(merge_shape(full), body, live) == replaced_parts(full, body, live)


def test_a_declared_property_that_says_nothing_is_not_read_as_undeclared() -> None:
    """Beside additionalProperties that say something, a silent property stays: left out,
    it would read as one of them."""
    schema = {
        "properties": {"plain": {"type": "object"}},
        "additionalProperties": {"x-kubernetes-map-type": "atomic"},
    }
    body, live = {"plain": {"k": "1"}, "other": {"k": "1"}}, {"plain": {"k": "2"}, "other": {}}
    assert replaced_parts(merge_shape(schema), body, live) == ["other"]
    assert replaced_parts(schema, body, live) == ["other"]
