"""Where a model server can land: the nodes it selects that have the GPUs for one pod.

Not kind-specific: each target kind's facts give the node selector and the GPUs per pod
(kvtier/targets/).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.targets.facts import GPU_RESOURCE, as_bytes, as_int, get


@dataclass(frozen=True)
class Placement:
    """Where the model server can land, from the nodes it selects."""

    eligible_nodes: tuple[str, ...]
    node_memory_bytes: int | None  # the smallest allocatable memory among them
    pods_per_node: int


# Every tier decides over the same nodes: a placement is kept per (nodes, selector, GPUs)
# while no node changes. A node's uid and resourceVersion name its content; nodes without
# them (built by hand, not read from the API) are never kept.
_PLACEMENTS: dict[tuple[Any, ...], Placement] = {}
PLACEMENTS_KEPT = 256


def placement(
    nodes: Sequence[Mapping[str, Any]], node_selector: Mapping[str, str], gpus_per_pod: int
) -> Placement:
    """Nodes that match the selector and have the GPUs for one model-server pod."""
    versions = tuple(
        (get(n, "metadata", "uid"), get(n, "metadata", "resourceVersion")) for n in nodes
    )
    if not all(uid and version for uid, version in versions):
        return _placement(nodes, node_selector, gpus_per_pod)
    key = (versions, tuple(sorted(node_selector.items())), gpus_per_pod)
    kept = _PLACEMENTS.get(key)
    if kept is None:
        kept = _placement(nodes, node_selector, gpus_per_pod)
        if len(_PLACEMENTS) >= PLACEMENTS_KEPT:
            del _PLACEMENTS[next(iter(_PLACEMENTS))]  # the oldest
        _PLACEMENTS[key] = kept
    return kept


def _placement(
    nodes: Sequence[Mapping[str, Any]], node_selector: Mapping[str, str], gpus_per_pod: int
) -> Placement:
    names: list[str] = []
    memories: list[int] = []
    per_node: list[int] = []
    for node in nodes:
        labels = get(node, "metadata", "labels") or {}
        if any(labels.get(k) != v for k, v in node_selector.items()):
            continue
        allocatable = get(node, "status", "allocatable") or {}
        gpus = as_int(allocatable.get(GPU_RESOURCE)) or 0
        if gpus_per_pod > 0 and gpus < gpus_per_pod:
            continue
        names.append(str(get(node, "metadata", "name")))
        memory = as_bytes(allocatable.get("memory"))
        if memory:
            memories.append(memory)
        per_node.append(max(gpus // gpus_per_pod, 1) if gpus_per_pod > 0 else 1)
    return Placement(
        eligible_nodes=tuple(sorted(names)),
        node_memory_bytes=min(memories) if memories else None,
        pods_per_node=max(per_node) if per_node else 1,
    )
