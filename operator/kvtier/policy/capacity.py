"""Whether the nodes a model server may land on can hold a StorageClass NVMe pool's per-pod
claims, from the CSIStorageCapacity objects (storage.k8s.io/v1) the class's driver publishes.

A node takes a claim as the scheduler's volume binding judges it for a WaitForFirstConsumer
class: some capacity object of the class whose nodeTopology selects the node admits the size
(its maximumVolumeSize, else its capacity). The check gates the apply, so a model server is
never restarted onto claims no node can provision; once the target carries the claims, the
published figures shrink by the tier's own volumes and say nothing new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.api.tier import ConditionType
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.render.quantities import quantity_to_bytes, to_quantity

PROVISIONED = ConditionType.PROVISIONED.value


@dataclass(frozen=True)
class NodeRoom:
    """What one node's published capacity holds of claims of one size."""

    node: str
    published: int | None  # the most capacity one object reports there; None: none covers it
    claims: int  # claims of the size the node can take


def _requirement(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = str(expr.get("key")), expr.get("operator")
    values = expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # an operator the API would not admit selects nothing


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector as nodeTopology uses it: unset selects no node, empty selects all."""
    if selector is None:
        return False
    match = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    return all(_requirement(e, labels) for e in selector.get("matchExpressions") or [])


def class_capacities(
    class_name: str, capacities: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The CSIStorageCapacity objects published for one StorageClass (in any namespace)."""
    return [c for c in capacities if c.get("storageClassName") == class_name]


def _bytes(value: object) -> int | None:
    return None if value is None else quantity_to_bytes(value)


def node_room(
    node: Mapping[str, Any], published: Sequence[Mapping[str, Any]], claim_bytes: int
) -> NodeRoom:
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    best: int | None = None
    claims = 0
    for obj in published:
        if not selector_matches(obj.get("nodeTopology"), labels):
            continue
        capacity = _bytes(obj.get("capacity"))
        largest = _bytes(obj.get("maximumVolumeSize"))
        if capacity is not None:
            best = capacity if best is None else max(best, capacity)
        admits = largest if largest is not None else capacity
        if admits is None or admits < claim_bytes:
            continue
        # Without a capacity figure only the one volume the maximum admits is known to fit.
        claims = max(claims, 1 if capacity is None else capacity // claim_bytes)
    return NodeRoom(str(meta.get("name")), best, claims)


def _rooms_text(rooms: Sequence[NodeRoom]) -> str:
    return ", ".join(
        f"{r.node} {'none' if r.published is None else to_quantity(r.published)}" for r in rooms
    )


def capacity_verdict(
    pool: str,
    class_name: str,
    storage_class: Mapping[str, Any] | None,
    capacities: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    claim_bytes: int,
    replicas: int,
    applied: bool,
) -> Verdict:
    """Provisioned for a StorageClass pool. `nodes`: the pool's nodes the model server may
    land on; `applied`: the target already carries the tier's claims."""
    size = to_quantity(claim_bytes)
    if storage_class is None:
        return Verdict(
            PROVISIONED,
            FALSE,
            "StorageClassNotFound",
            f"spec.nvmePools[{pool}].storageClassName: StorageClass {class_name} not found; "
            "the model server's claims could not be provisioned",
        )
    what = f"per-pod claims of StorageClass {class_name}, {size} each"
    if applied:
        return Verdict(PROVISIONED, TRUE, "Provisioned", f"NVMe tier: {what}")
    published = class_capacities(class_name, capacities)
    if not published:
        return Verdict(
            PROVISIONED,
            TRUE,
            "CapacityNotPublished",
            f"NVMe tier: {what}; the driver of {class_name} publishes no CSIStorageCapacity, "
            "so no capacity check (a claim that does not fit stays Pending)",
        )
    rooms = [node_room(n, published, claim_bytes) for n in nodes]
    holds = sum(r.claims for r in rooms)
    if holds < replicas:
        return Verdict(
            PROVISIONED,
            FALSE,
            "InsufficientStorageCapacity",
            f"{replicas} replica(s) need {what}, but the published capacity holds {holds} on "
            f"the {len(rooms)} node(s) the model server may land on "
            f"({_rooms_text(rooms) or 'no node'}); the target is left unchanged",
        )
    return Verdict(
        PROVISIONED,
        TRUE,
        "CapacityAvailable",
        f"NVMe tier: {what}; published capacity holds {holds} for {replicas} replica(s) "
        f"({_rooms_text(rooms)})",
    )
