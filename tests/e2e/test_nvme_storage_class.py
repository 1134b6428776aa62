"""An NVMe pool backed by a StorageClass, end to end on the real control plane: a CSI-less
class with WaitForFirstConsumer (no provisioner runs for it), its driver's CSIStorageCapacity
published by the test, and a KVCacheTier on the pool. kvtier holds the target back while the
capacity is too small, then gives it a per-pod claim of that class (no PV, no class of its
own); the real controller-manager makes the pod's claim and the real scheduler, reading the
same capacity, picks the one node that can hold it. Deleting the tier restores the target."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import create_target, inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    exists,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import get_target, pod_from_isvc

POOL = "lvm-nvme"
CLASS = "kvtier-e2e-lvm"
DRIVER = "lvm.e2e.kvtier.test"  # a name only: nothing serves this driver
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": POOL,
            "storageClassName": CLASS,
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
        }
    ],
}
STUDY = {"averageContextTokens": 50000, "concurrentSessions": 64}
LLAMA = "hf://meta-llama/Llama-3.1-70B-Instruct"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


@pytest.fixture(scope="module")
def driver_ns(admin_api: client.ApiClient, operator: OperatorProcess) -> Iterator[str]:
    """The class, its CSIDriver (storage capacity tracking on, so the scheduler reads the
    capacity too) and the namespace the driver would publish its capacity in."""
    storage = client.StorageV1Api(admin_api)
    storage.create_storage_class(
        client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=CLASS),
            provisioner=DRIVER,
            volume_binding_mode="WaitForFirstConsumer",
            reclaim_policy="Delete",
        )
    )
    storage.create_csi_driver(
        client.V1CSIDriver(
            metadata=client.V1ObjectMeta(name=DRIVER),
            spec=client.V1CSIDriverSpec(attach_required=False, storage_capacity=True),
        )
    )
    apply_policy(admin_api, POLICY)
    try:
        yield new_namespace(admin_api, "lvm-driver")
    finally:
        storage.delete_csi_driver(DRIVER)
        storage.delete_storage_class(CLASS)


def publish(api: client.ApiClient, ns: str, node: str, capacity: str) -> None:
    """What the driver's external-provisioner would publish for one node."""
    body = client.V1CSIStorageCapacity(
        metadata=client.V1ObjectMeta(name=f"csisc-{node}"),
        storage_class_name=CLASS,
        node_topology=client.V1LabelSelector(match_labels={"kubernetes.io/hostname": node}),
        capacity=capacity,
    )
    storage = client.StorageV1Api(api)
    try:
        current = storage.read_namespaced_csi_storage_capacity(f"csisc-{node}", ns)
        body.metadata.resource_version = current.metadata.resource_version
        storage.replace_namespaced_csi_storage_capacity(f"csisc-{node}", ns, body)
    except ApiException as exc:
        if exc.status != 404:
            raise
        storage.create_namespaced_csi_storage_capacity(ns, body)


def pool_nodes(api: client.ApiClient) -> list[str]:
    nodes = client.CoreV1Api(api).list_node(label_selector="kvcache.io/local-nvme=true").items
    return sorted(str(n.metadata.name) for n in nodes)


def test_storage_class_pool_end_to_end(admin_api: client.ApiClient, driver_ns: str) -> None:
    nodes = pool_nodes(admin_api)
    assert len(nodes) >= 2, nodes
    for node in nodes:
        publish(admin_api, driver_ns, node, "1Ti")
    ns = new_namespace(admin_api, "nvme-class")
    user = inference_service("llama-70b", tp=4, model_uri=LLAMA)
    create_target(admin_api, ns, user)
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "llama-70b"},
            "workload": STUDY,
            "disk": {"type": "NVMe", "nvme": {"pool": POOL, "size": "2Ti"}},
            "probe": {"enabled": False},  # probing has tests of its own
        },
    )

    # Too little published capacity: the condition names the need and every node's figure.
    held = wait_condition(
        admin_api, ns, "llama", "Provisioned", "False", "InsufficientStorageCapacity"
    )
    message = next(c for c in held["status"]["conditions"] if c["type"] == "Provisioned")["message"]
    assert f"1 replica(s) need per-pod claims of StorageClass {CLASS}, 2Ti each" in message
    assert "holds 0" in message and all(f"{n} 1Ti" in message for n in nodes)
    unchanged = get_target(admin_api, ns, "InferenceService", "llama-70b", "v1beta1")
    assert "volumes" not in unchanged["spec"]["predictor"]

    # One node gets room: the tier applies, with claims of the class and no storage of its own.
    roomy = nodes[-1]
    publish(admin_api, driver_ns, roomy, "5Ti")
    tier = wait_condition(admin_api, ns, "llama", "Ready", "True", "Applied", timeout=90)
    provisioned = next(c for c in tier["status"]["conditions"] if c["type"] == "Provisioned")
    assert provisioned["status"] == "True"
    assert f"{roomy} 5Ti" in provisioned["message"] or provisioned["reason"] == "Provisioned"
    patched = get_target(admin_api, ns, "InferenceService", "llama-70b", "v1beta1")
    (volume,) = [v for v in patched["spec"]["predictor"]["volumes"] if "ephemeral" in v]
    assert volume["ephemeral"]["volumeClaimTemplate"]["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "storageClassName": CLASS,
        "resources": {"requests": {"storage": "2Ti"}},
    }
    core = client.CoreV1Api(admin_api)
    assert not [
        pv
        for pv in core.list_persistent_volume().items
        if (pv.metadata.labels or {}).get("kvcache.io/tier-namespace") == ns
    ]
    storage = client.StorageV1Api(admin_api)
    assert not exists(lambda: storage.read_storage_class(f"kvtier-nvme-{POOL}"))

    # Play KServe: the patched replica's pod. The ephemeral volume controller makes its claim
    # and the scheduler, judging the same CSIStorageCapacity, picks the node with room.
    core.create_namespaced_pod(ns, pod_from_isvc(patched, "llama-70b-0"))  # type: ignore[arg-type]
    claim_name = f"llama-70b-0-{volume['name']}"
    claim = eventually(
        lambda: (
            (
                (
                    c := core.read_namespaced_persistent_volume_claim(claim_name, ns)
                ).metadata.annotations
                or {}
            ).get(SELECTED_NODE)
            and c
        ),
        timeout=60,
        what="the scheduler's node for the pod's claim",
    )
    assert claim.spec.storage_class_name == CLASS
    assert claim.metadata.annotations[SELECTED_NODE] == roomy

    # Removing the tier restores the user's manifest.
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "llama"
    )
    eventually(
        lambda: (
            not exists(
                lambda: client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
                    "kvcache.io", "v1alpha1", ns, "kvcachetiers", "llama"
                )
            )
        ),
        what="tier deleted (finalizer released)",
    )
    restored = get_target(admin_api, ns, "InferenceService", "llama-70b", "v1beta1")
    assert restored["spec"]["predictor"]["model"] == user["spec"]["predictor"]["model"]
    assert "volumes" not in restored["spec"]["predictor"]
    assert "kvcache.io/applied" not in (restored["metadata"].get("annotations") or {})
    core.delete_namespaced_pod("llama-70b-0", ns)
