"""The one write a target kind sends per change, and the guarded JSON patch ops of its
take-back.

- an apply (server-side, field manager kvtier-operator, forced) whose body holds kvtier's
  fields: keyed lists and plain maps merge, so the user's other entries stay theirs. An atomic
  list kvtier adds to (a container's args, KServe's predictor volumes) is carried whole: the
  user's items as read with kvtier's. Such an apply is guarded (`apply_write(..., carried)`):
  it is sent only while the object's generation is the one read, with the resourceVersion
  just read as its precondition (controller/writer.py), so a concurrent edit of the list is
  never overwritten: kvtier re-reads and re-renders instead.
  kvtier's ownership then covers the whole list, so an apply that later leaves it out would
  delete it: while the object holds the list, every apply carries it (`carried_list`);
- a JSON patch for the take-back (and a scheduler's inline plugins given back): every op is
  guarded by a `test` of the exact value kvtier read, so a concurrent change fails the patch
  (it is re-read and re-rendered), it is never overwritten.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.render.result import DesiredWrite
from kvtier.targets.facts import get


def pointer(path: Sequence[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _overlay(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, maps merged key by key (kvtier's fields on a user's list item)."""
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = _overlay(below, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_items(
    current: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]], drop: set[str]
) -> list[dict[str, Any]]:
    """`current` without the named items in `drop`, with `items` laid over the entries of the
    same name in place (new ones appended)."""
    by_name = {str(i["name"]): i for i in items}
    out = []
    for entry in current:
        name = str(entry.get("name"))
        if name in by_name:
            out.append(_overlay(entry, by_name.pop(name)))
        elif name not in drop:
            out.append(dict(entry))
    return [*out, *(copy.deepcopy(dict(i)) for i in by_name.values())]


def list_ops(
    target: Mapping[str, Any], path: Sequence[str], new: Sequence[Any]
) -> list[dict[str, Any]]:
    """JSON patch ops that set the atomic list at `path` to `new` only if it still holds what
    kvtier read (a `test` of the whole value, or of its parent when the list is absent); []
    when it already holds `new`."""
    current = get(target, *path)
    if (current or []) == list(new):
        return []
    if current is None:
        parent = list(path[:-1])
        return [
            {"op": "test", "path": pointer(parent), "value": get(target, *parent)},
            {"op": "add", "path": pointer(path), "value": list(new)},
        ]
    test = {"op": "test", "path": pointer(path), "value": current}
    if not new:
        return [test, {"op": "remove", "path": pointer(path)}]
    return [test, {"op": "replace", "path": pointer(path), "value": list(new)}]


def value_ops(
    target: Mapping[str, Any], path: Sequence[str], base: Any, floor: int | None = None
) -> list[dict[str, Any]]:
    """Ops that put the user's value `base` back at `path` (None: they had none), guarded
    by a test of what is there; [] when nothing is there. Removing a value also removes the
    maps above it (down to `floor` keys of the path) that held nothing else, so no empty
    `requests: {}` or `annotations: {}` of kvtier's making is left behind."""
    current = get(target, *path)
    if current is None or current == base:
        return []
    if base is not None:
        return [
            {"op": "test", "path": pointer(path), "value": current},
            {"op": "replace", "path": pointer(path), "value": base},
        ]
    top = list(path)
    while floor is not None and len(top) > floor:
        parent = get(target, *top[:-1])
        if not isinstance(parent, Mapping) or set(parent) != {top[-1]}:
            break
        top = top[:-1]
    value = get(target, *top)
    return [
        {"op": "test", "path": pointer(top), "value": value},
        {"op": "remove", "path": pointer(top)},
    ]


def item_ops(
    target: Mapping[str, Any], path: Sequence[str], key: str, values: set[str]
) -> list[dict[str, Any]]:
    """Ops that take the items whose `key` is in `values` out of the list at `path` (each
    guarded by a test of that key; the whole list goes when nothing else is left)."""
    items = get(target, *path) or []
    hits = [i for i, item in enumerate(items) if item.get(key) in values]
    if not hits:
        return []
    if len(hits) == len(items):
        return [
            {"op": "test", "path": pointer(path), "value": items},
            {"op": "remove", "path": pointer(path)},
        ]
    ops: list[dict[str, Any]] = []
    for i in reversed(hits):  # from the end, so the indexes before stay right
        where = [*path, str(i)]
        ops += [
            {"op": "test", "path": pointer([*where, key]), "value": items[i][key]},
            {"op": "remove", "path": pointer(where)},
        ]
    return ops


def json_patch(
    target: Mapping[str, Any], ops: list[dict[str, Any]], what: str
) -> list[DesiredWrite]:
    """The JSON patch write of `ops` on the target ([] without ops); `what` for a person."""
    if not ops:
        return []
    meta = target["metadata"]
    return [
        DesiredWrite(
            "Patch",
            str(target["apiVersion"]),
            str(target["kind"]),
            meta["name"],
            meta["namespace"],
            {"jsonPatch": ops},
            f"{target['kind']} {meta['namespace']}/{meta['name']}: {what}",
        )
    ]


def carried_list(current: Sequence[Any] | None, new: Sequence[Any]) -> list[Any] | None:
    """The atomic list an apply carries whole: `new` (the user's items as read with kvtier's)
    whenever it or the object holds one; None when neither does (nothing to carry). An empty
    `new` is carried as [] while the object still holds kvtier's items, so they go."""
    return list(new) if new or current else None


def apply_write(
    target: Mapping[str, Any],
    body: dict[str, Any],
    summary: str,
    carried: Sequence[str] = (),
) -> DesiredWrite:
    """The server-side apply of `body` (kvtier's fields of the target, as its apiVersion).
    `carried`: the dotted paths (as served_schema.replaced_parts names them) of the atomic
    lists the body carries whole; the apply is then guarded by the target's generation as
    read (a target read without one, in an offline plan, is not guarded)."""
    meta = target["metadata"]
    generation = meta.get("generation") if carried else None
    return DesiredWrite(
        "Apply",
        body["apiVersion"],
        body["kind"],
        meta["name"],
        meta["namespace"],
        body,
        summary,
        tuple(carried),
        generation if isinstance(generation, int) else None,
    )
