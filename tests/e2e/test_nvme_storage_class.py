"""An NVMe pool backed by a StorageClass, end to end on the real control plane with KServe's
own InferenceService controller (tests/e2e/kserve_isvc.py): a CSI-less class with
WaitForFirstConsumer (no provisioner runs for it), its driver's CSIStorageCapacity published
by the test, and a KVCacheTier on the pool. kvtier holds the target back while the capacity
is too small, then gives it a per-pod claim of that class (no PV, no class of its own); KServe
writes the claim template into its Deployment, the real controller-manager makes the claim of
the pod it builds from it and the real scheduler, reading the same capacity, picks the one
node that can hold it. Deleting the tier restores the service and KServe's pod template."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.sizing.units import parse_quantity
from tests.e2e.conftest import inference_service
from tests.e2e.kserve_isvc import (
    KServeISVCStack,
    container,
    create_isvc,
    get_isvc,
    plain_namespace,
    predictor_deployments,
    predictor_pods,
)
from tests.e2e.kube_helpers import apply_policy, create_tier, eventually, exists, wait_condition
from tests.e2e.test_operator_apply import POLICY as STACK_POLICY

POOL = "lvm-nvme"
CLASS = "kvtier-e2e-lvm"
DRIVER = "lvm.e2e.kvtier.test"  # a name only: nothing serves this driver
# The stack's policy with the class-backed pool beside its own pools.
POLICY: dict[str, Any] = {
    **STACK_POLICY,
    "nvmePools": [
        *STACK_POLICY["nvmePools"],
        {
            "name": POOL,
            "storageClassName": CLASS,
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
        },
    ],
}
STUDY = {"averageContextTokens": 50000, "concurrentSessions": 64}
LLAMA = "hf://meta-llama/Llama-3.1-70B-Instruct"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


@pytest.fixture(scope="module")
def driver_ns(kserve_isvc_stack: KServeISVCStack) -> Iterator[str]:
    """The class, its CSIDriver (storage capacity tracking on, so the scheduler reads the
    capacity too), the policy's pool of it and the namespace the driver would publish its
    capacity in; the stack's own policy again afterwards."""
    admin_api = kserve_isvc_stack.api
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
        yield plain_namespace(admin_api, "lvm-driver")
    finally:
        apply_policy(admin_api, STACK_POLICY)
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


def roomiest(api: client.ApiClient, nodes: list[str]) -> str:
    """The pool node with the most GPUs, then memory, that no pod holds: the session's KServe
    cluster still runs the pods of the modules before this one, and the node given room must
    also have room for the pod."""
    held: dict[str, tuple[float, float]] = {n: (0.0, 0.0) for n in nodes}
    for pod in client.CoreV1Api(api).list_pod_for_all_namespaces().items:
        node = str(pod.spec.node_name)
        if node not in held or str(pod.status.phase) in ("Succeeded", "Failed"):
            continue
        for c in pod.spec.containers:
            requests = (c.resources and c.resources.requests) or {}
            gpus, memory = held[node]
            held[node] = (
                gpus + float(parse_quantity(requests.get("nvidia.com/gpu", "0"))),
                memory + float(parse_quantity(requests.get("memory", "0"))),
            )
    return min(nodes, key=lambda n: (*held[n], n))


def scheduling(api: client.ApiClient, ns: str, pod: str) -> str:
    """The pod's PodScheduled condition, for a failure message."""
    found = client.CoreV1Api(api).read_namespaced_pod(pod, ns)
    return "; ".join(
        f"{c.type}={c.status} {c.reason}: {c.message}" for c in found.status.conditions or []
    )


def test_storage_class_pool_end_to_end(
    kserve_isvc_stack: KServeISVCStack,
    driver_ns: str,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    admin_api = kserve_isvc_stack.api
    nodes = pool_nodes(admin_api)
    assert len(nodes) >= 2, nodes
    for node in nodes:
        publish(admin_api, driver_ns, node, "1Ti")
    ns = kserve_namespace(admin_api, "nvme-class")
    name = "llama-70b"
    user = inference_service(name, tp=4, model_uri=LLAMA)
    stored = create_isvc(admin_api, ns, user)  # as KServe's defaulting webhook left it
    before = template(admin_api, ns, name)
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": name},
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
    unchanged = get_isvc(admin_api, ns, name)
    assert "volumes" not in unchanged["spec"]["predictor"]

    # One node gets room: the tier applies, with claims of the class and no storage of its own.
    roomy = roomiest(admin_api, nodes)
    publish(admin_api, driver_ns, roomy, "5Ti")
    tier = wait_condition(admin_api, ns, "llama", "Ready", "True", "Applied", timeout=90)
    provisioned = next(c for c in tier["status"]["conditions"] if c["type"] == "Provisioned")
    assert provisioned["status"] == "True"
    assert f"{roomy} 5Ti" in provisioned["message"] or provisioned["reason"] == "Provisioned"
    patched = get_isvc(admin_api, ns, name)
    (volume,) = [v for v in patched["spec"]["predictor"]["volumes"] if "ephemeral" in v]
    claim_spec = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "storageClassName": CLASS,
        "resources": {"requests": {"storage": "2Ti"}},
    }
    assert volume["ephemeral"]["volumeClaimTemplate"]["spec"] == claim_spec
    core = client.CoreV1Api(admin_api)
    assert not [
        pv
        for pv in core.list_persistent_volume().items
        if (pv.metadata.labels or {}).get("kvcache.io/tier-namespace") == ns
    ]
    storage = client.StorageV1Api(admin_api)
    assert not exists(lambda: storage.read_storage_class(f"kvtier-nvme-{POOL}"))

    # KServe's Deployment carries the claim template; for the pod the controller-manager
    # builds from it, the ephemeral volume controller makes the claim and the scheduler,
    # judging the same CSIStorageCapacity, picks the node with room.
    def with_claim() -> dict[str, Any] | None:
        for pod in predictor_pods(admin_api, ns, name):
            names = {v["name"] for v in pod["spec"].get("volumes") or []}
            mounts = container(pod["spec"], "kserve-container").get("volumeMounts") or []
            mounted = volume["name"] in {m["name"] for m in mounts}
            if volume["name"] in names and mounted and not pod["metadata"].get("deletionTimestamp"):
                return pod
        return None

    pod = eventually(with_claim, 120, "a pod of KServe's Deployment mounting the tier's claim")

    def scheduled_claim() -> Any:
        # The pod of the Deployment's current template: a rollout may replace the first one.
        current = with_claim()
        if current is None:
            return None
        claim_name = f"{current['metadata']['name']}-{volume['name']}"
        found = core.read_namespaced_persistent_volume_claim(claim_name, ns)
        return found if (found.metadata.annotations or {}).get(SELECTED_NODE) else None

    try:
        claim = eventually(scheduled_claim, 60, "the scheduler's node for the pod's claim")
    except AssertionError as exc:
        pod = with_claim() or pod
        pod_name = pod["metadata"]["name"]
        raise AssertionError(
            f"{exc}; pod {pod_name}: {scheduling(admin_api, ns, pod_name)}"
        ) from exc
    assert claim.spec.storage_class_name == CLASS
    assert claim.metadata.annotations[SELECTED_NODE] == roomy

    # Removing the tier restores the user's service, and KServe the user's pod template.
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
    restored = get_isvc(admin_api, ns, name)
    assert restored["spec"] == stored["spec"]
    assert "volumes" not in restored["spec"]["predictor"]
    assert "kvcache.io/applied" not in (restored["metadata"].get("annotations") or {})
    eventually(
        lambda: template(admin_api, ns, name) == before,
        60,
        "KServe's pod template as before the tier",
    )


def template(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    """The predictor Deployment's pod template as KServe last wrote it."""
    found: dict[str, Any] = eventually(
        lambda: predictor_deployments(api, ns, name).get(f"{name}-predictor"),
        120,
        f"KServe's Deployment {name}-predictor",
    )
    return dict(found["spec"]["template"])
