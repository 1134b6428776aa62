"""Which parts of an object a server-side apply would replace whole, read from the schema the
API server serves for its kind (OpenAPI v3), never guessed from the object's managedFields.

An apply merges granular parts field by field: a structural map (the default for an object
with properties), a list of `x-kubernetes-list-type: map` by its keys, a `set` by value. It
replaces an atomic part whole: a map of `x-kubernetes-map-type: atomic`, a list of
`x-kubernetes-list-type: atomic`, and any list without a list type (a CRD's default). Where
the schema preserves unknown fields without declaring them, the merge deduces the type from
the value: maps stay granular, lists are atomic. So an apply body that reaches into an
atomic part carries only kvtier's share of something the user filled: the API server would
drop the rest (KServe's minimal CRDs declare the whole `spec` atomic).

`replaced_parts(schema, body, live)` names such parts; the caller refuses the write
(`AtomicSpec`). A part the object does not hold yet, or holds with exactly the value the
apply carries, loses nothing and is not named.

The operator keeps the schemas of its targets' kinds for its whole life, so `kind_schema`
keeps only their merge shape (`merge_shape`): the list and map types and the way to them.
Where a schema says nothing of how its parts merge, every list is atomic and every map
granular, which is also what the merge does with no schema at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

MAP_TYPE = "x-kubernetes-map-type"
LIST_TYPE = "x-kubernetes-list-type"
LIST_KEYS = "x-kubernetes-list-map-keys"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
GVK = "x-kubernetes-group-version-kind"
_REF_PREFIX = "#/components/schemas/"
# An apply's identity fields, never merged as content.
_IDENTITY = ("apiVersion", "kind")
# Not kept in a resolved schema: `allOf` is folded in; descriptions say nothing of how a part
# merges and are most of a CRD's schema.
_DROPPED = frozenset({"allOf", "description"})


def kind_schema(document: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any] | None:
    """The schema of `kind` at `api_version` in one group version's OpenAPI v3 document
    (`GET /openapi/v3/apis/<group>/<version>`), its `$ref`s resolved; None if absent."""
    group, _, version = api_version.rpartition("/")
    schemas = (document.get("components") or {}).get("schemas") or {}
    for schema in schemas.values():
        for gvk in schema.get(GVK) or []:
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (
                group,
                version,
                kind,
            ):
                shape: dict[str, Any] = merge_shape(resolve(schemas, schema))
                return shape
    return None


def resolve(schemas: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with its `$ref`s into `schemas` (a document's components) resolved."""
    resolved: dict[str, Any] = _Resolver(schemas).node(schema)
    return resolved


def merge_shape(schema: Mapping[str, Any]) -> dict[str, Any]:
    """What of a resolved schema says how an apply merges its parts, equal for
    `replaced_parts` to the whole schema: atomic maps, sets and keyed lists (with their keys),
    and the properties, items and additional properties that lead to one. A node that says
    nothing else comes out as `{}`, one shared object; shared components stay shared."""
    return _Shaper().node(schema)


class _Shaper:
    def __init__(self) -> None:
        self.done: dict[int, dict[str, Any]] = {}
        self.empty: dict[str, Any] = {}

    def node(self, node: Mapping[str, Any]) -> dict[str, Any]:
        known = self.done.get(id(node))
        if known is not None:
            return known
        out: dict[str, Any] = {}
        # A list is replaced whole unless it is a set or a keyed list, whose keys and items
        # then say how its items merge; an atomic map is replaced whole, whatever is in it.
        if node.get(LIST_TYPE) in ("map", "set"):
            out[LIST_TYPE] = node[LIST_TYPE]
            if node[LIST_TYPE] == "map":
                if LIST_KEYS in node:
                    out[LIST_KEYS] = node[LIST_KEYS]
                self._nested(node, "items", out)
        if node.get(MAP_TYPE) == "atomic":
            out[MAP_TYPE] = "atomic"
        else:
            self._nested(node, "additionalProperties", out)
            self._properties(node, out)
        result = out or self.empty
        self.done[id(node)] = result
        return result

    def _nested(self, node: Mapping[str, Any], key: str, out: dict[str, Any]) -> None:
        child = node.get(key)
        if isinstance(child, Mapping) and (shaped := self.node(child)):
            out[key] = shaped

    def _properties(self, node: Mapping[str, Any], out: dict[str, Any]) -> None:
        props = node.get("properties")
        if not isinstance(props, Mapping):
            return
        # A property left out reads as undeclared, i.e. as additionalProperties: only where
        # those say nothing may a property that says nothing go.
        keep_all = "additionalProperties" in out
        shaped = {
            name: self.node(sub) if isinstance(sub, Mapping) else self.empty
            for name, sub in props.items()
        }
        kept = {name: sub for name, sub in shaped.items() if sub or keep_all}
        if kept:
            out["properties"] = kept


def document_kinds(document: Mapping[str, Any]) -> frozenset[str]:
    """The kinds a group version's OpenAPI v3 document defines schemas of."""
    schemas = (document.get("components") or {}).get("schemas") or {}
    return frozenset(
        str(gvk.get("kind"))
        for schema in schemas.values()
        for gvk in schema.get(GVK) or []
        if isinstance(gvk, Mapping)
    )


class _Resolver:
    """Replaces every `$ref` into the document's components by its target and folds a lone
    `allOf` (how OpenAPI v3 wraps a `$ref` with siblings) in. Built-in kinds share component
    types (ObjectMeta, Container, Quantity) everywhere: each is resolved once and the same
    object reused, so the result stays as small as the document. A reference to a component
    being resolved (a recursive schema such as JSONSchemaProps) reads as unknown."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self.schemas = schemas
        self.done: dict[str, Any] = {}
        self.open: set[str] = set()

    def ref(self, name: str) -> Any:
        if name in self.done:
            return self.done[name]
        if name in self.open:
            return {}
        self.open.add(name)
        self.done[name] = self.node(self.schemas.get(name, {}))
        self.open.discard(name)
        return self.done[name]

    def node(self, node: Any) -> Any:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
                target = self.ref(ref[len(_REF_PREFIX) :])
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**target, **self.node(rest)} if rest else target
            out = {k: self.node(v) for k, v in node.items() if k not in _DROPPED}
            for part in node.get("allOf") or []:
                for key, value in self.node(part).items():
                    out.setdefault(key, value)
            return out
        if isinstance(node, list):
            return [self.node(v) for v in node]
        return node


def replaced_parts(
    schema: Mapping[str, Any], body: Mapping[str, Any], live: Mapping[str, Any] | None
) -> list[str]:
    """Dotted paths of the atomic parts an apply of `body` would replace while `live` holds
    something else there (`[]`: the apply only merges). metadata is the API server's own
    (labels and annotations are granular maps) and not looked at."""
    out: list[str] = []
    for key, value in body.items():
        if key in _IDENTITY or key == "metadata":
            continue
        child = _child(schema, key)
        out += _replaced(child, value, _at(live, key), (key,))
    return out


def _replaced(
    schema: Mapping[str, Any] | None, value: Any, live: Any, path: tuple[str, ...]
) -> list[str]:
    if isinstance(value, (str, int, float)):  # a leaf replaces nothing but itself
        return []
    if isinstance(value, (dict, Mapping)):
        if schema is not None and schema.get(MAP_TYPE) == "atomic":
            return [] if live is None or live == value else [_dotted(path)]
        out: list[str] = []
        for key, sub in value.items():
            out += _replaced(_child(schema, key), sub, _at(live, key), (*path, key))
        return out
    if isinstance(value, list):
        kind = schema.get(LIST_TYPE) if schema is not None else None
        if kind == "map":
            return list(_replaced_items(schema or {}, value, live, path))
        if kind == "set":
            return []
        return [] if live is None or live == value else [_dotted(path)]
    return []


def _replaced_items(
    schema: Mapping[str, Any], items: Sequence[Any], live: Any, path: tuple[str, ...]
) -> Iterator[str]:
    """The parts replaced inside the items of a keyed list, each matched to the live item
    with the same keys (an item the object does not hold yet is all new)."""
    keys = list(schema.get(LIST_KEYS) or [])
    item_schema = schema.get("items")
    current = [i for i in live if isinstance(i, Mapping)] if isinstance(live, list) else []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        ident = [item.get(k) for k in keys]
        match = next((c for c in current if [c.get(k) for k in keys] == ident), None)
        label = ",".join(f"{k}={v}" for k, v in zip(keys, ident, strict=True))
        yield from _replaced(item_schema, item, match, (*path, f"[{label}]"))


def _child(schema: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    """The schema of field `key` of an object node; None where it declares none (unknown
    fields, preserved or not, merge by the value's own shape)."""
    if schema is None:
        return None
    props = schema.get("properties")
    if (isinstance(props, (dict, Mapping))) and key in props:
        found = props[key]
        return found if isinstance(found, (dict, Mapping)) else None
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, (dict, Mapping)) else None


def _at(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, (dict, Mapping)) else None


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[", "[")
