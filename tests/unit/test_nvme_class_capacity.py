"""CSIStorageCapacity against a StorageClass NVMe pool's per-pod claims."""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.policy.capacity import (
    capacity_verdict,
    class_capacities,
    node_room,
    selector_matches,
)
from kvtier.policy.conditions import Verdict

TiB = 1 << 40
CLASS = "lvms-vg1"
STORAGE_CLASS = {"metadata": {"name": CLASS}, "volumeBindingMode": "WaitForFirstConsumer"}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}


def capacity(
    node_name: str | None,
    size: str | None,
    maximum: str | None = None,
    storage_class: str = CLASS,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": f"csisc-{node_name}", "namespace": "openshift-storage"},
        "storageClassName": storage_class,
    }
    if node_name is not None:
        obj["nodeTopology"] = {"matchLabels": {"topology.topolvm.io/node": node_name}}
    if size is not None:
        obj["capacity"] = size
    if maximum is not None:
        obj["maximumVolumeSize"] = maximum
    return obj


NODES = [node(f"gpu-{i}", **{"topology.topolvm.io/node": f"gpu-{i}"}) for i in range(3)]


def _expr(op: str, *values: str) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": "a", "operator": op}
    return {"matchExpressions": [{**expr, "values": list(values)} if values else expr]}


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {"a": "1"}, False),  # unset: the storage is reachable from no node
        ({}, {"a": "1"}, True),  # empty: from every node
        ({"matchLabels": {"a": "1"}}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (_expr("In", "1"), {"a": "1"}, True),
        (_expr("In", "1"), {}, False),
        (_expr("NotIn", "1"), {}, True),
        (_expr("NotIn", "1"), {"a": "1"}, False),
        (_expr("Exists"), {"a": ""}, True),
        (_expr("DoesNotExist"), {"a": ""}, False),
        (_expr("Gt", "1"), {"a": "2"}, False),
    ],
)
def test_node_topology_selects_nodes_as_a_label_selector(
    selector: dict[str, Any] | None, labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(selector, labels) is matches


def test_only_the_pools_class_counts() -> None:
    mine, other = capacity("gpu-0", "4Ti"), capacity("gpu-0", "4Ti", storage_class="other")
    assert class_capacities(CLASS, [mine, other]) == [mine]


def test_a_node_holds_as_many_claims_as_its_capacity_and_maximum_allow() -> None:
    room = node_room(NODES[0], [capacity("gpu-0", "7Ti")], 3 * TiB)
    assert (room.node, room.published, room.claims) == ("gpu-0", 7 * TiB, 2)
    # The largest volume is what one claim may take, whatever the total.
    assert node_room(NODES[0], [capacity("gpu-0", "7Ti", "2Ti")], 3 * TiB).claims == 0
    # A maximum alone says one claim fits, not how many.
    assert node_room(NODES[0], [capacity("gpu-0", None, "4Ti")], 3 * TiB).claims == 1
    # No figure at all: nothing is known to fit.
    assert node_room(NODES[0], [capacity("gpu-0", None)], TiB).claims == 0
    uncovered = node_room(NODES[1], [capacity("gpu-0", "7Ti")], TiB)
    assert (uncovered.published, uncovered.claims) == (None, 0)


def test_the_best_object_of_several_on_a_node_decides() -> None:
    objs = [capacity("gpu-0", "1Ti"), {**capacity("gpu-0", "5Ti"), "metadata": {"name": "b"}}]
    room = node_room(NODES[0], objs, 2 * TiB)
    assert (room.published, room.claims) == (5 * TiB, 2)


def verdict(
    caps: list[dict[str, Any]], replicas: int = 2, applied: bool = False, **kw: Any
) -> Verdict:
    args: dict[str, Any] = {
        "pool": "lvms-nvme",
        "class_name": CLASS,
        "storage_class": STORAGE_CLASS,
        "capacities": caps,
        "nodes": NODES,
        "claim_bytes": 3 * TiB,
        "replicas": replicas,
        "applied": applied,
    }
    return capacity_verdict(**{**args, **kw})


def test_enough_published_capacity_is_provisioned_with_the_figures() -> None:
    v = verdict([capacity("gpu-0", "3Ti"), capacity("gpu-2", "6Ti")], replicas=3)
    assert (v.type, v.status, v.reason) == ("Provisioned", "True", "CapacityAvailable")
    assert "holds 3 for 3 replica(s)" in v.message
    assert "gpu-0 3Ti, gpu-1 none, gpu-2 6Ti" in v.message


def test_too_little_capacity_names_the_need_and_each_node() -> None:
    v = verdict([capacity("gpu-0", "3Ti"), capacity("gpu-1", "2Ti")], replicas=2)
    assert (v.status, v.reason) == ("False", "InsufficientStorageCapacity")
    assert v.message.startswith(
        "2 replica(s) need per-pod claims of StorageClass lvms-vg1, 3Ti each, but the "
        "published capacity holds 1 on the 3 node(s)"
    )
    assert "gpu-0 3Ti, gpu-1 2Ti, gpu-2 none" in v.message
    none = verdict([capacity("gpu-0", "3Ti")], nodes=[])
    assert none.reason == "InsufficientStorageCapacity" and "(no node)" in none.message


def test_no_published_capacity_means_no_check_said_so() -> None:
    v = verdict([capacity("gpu-0", "1Ti", storage_class="other")])
    assert (v.status, v.reason) == ("True", "CapacityNotPublished")
    assert "publishes no CSIStorageCapacity, so no capacity check" in v.message


def test_a_missing_class_is_not_provisioned() -> None:
    v = verdict([capacity("gpu-0", "9Ti")], storage_class=None)
    assert (v.status, v.reason) == ("False", "StorageClassNotFound")
    assert "spec.nvmePools[lvms-nvme].storageClassName" in v.message and CLASS in v.message


def test_once_applied_the_tiers_own_volumes_do_not_count_against_it() -> None:
    # The published capacity now lacks what the tier's claims took: no new finding.
    v = verdict([capacity("gpu-0", "0")], applied=True)
    assert (v.status, v.reason) == ("True", "Provisioned")
    assert "per-pod claims of StorageClass lvms-vg1, 3Ti each" in v.message
    assert verdict([], storage_class=None, applied=True).reason == "StorageClassNotFound"
