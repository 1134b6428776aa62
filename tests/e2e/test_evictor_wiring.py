"""The operator runs the evictor beside every disk tier it provisions, on the local control
plane with KServe's own InferenceService controller (tests/e2e/kserve_isvc.py), in a Pod
Security `restricted` namespace: a CephFS tier gets its Deployment (whose ReplicaSet's pod is
admitted) and no sidecar in the pods KServe builds; an NVMe tier's InferenceService gets the
native sidecar beside the user's own init container (an atomic list on the InferenceService,
which kvtier writes whole), and the pod KServe's Deployment produces carries both and is
admitted; deleting the tiers removes the evictors and gives the user's service, and KServe
the user's pod template, back exactly.

The services take their model from a PVC: for an hf:// storageUri KServe v0.20.0's pod webhook
adds its storage-initializer, which sets no securityContext and is refused under restricted
(tests/e2e/test_pod_security.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from kvtier.api.common import quantity_bytes
from kvtier.names.labels import TIER_ID
from kvtier.names.objects import EVICTOR_CONTAINER as EVICTOR
from kvtier.names.objects import KV_CACHE_VOLUME, tier_id
from tests.e2e import audit
from tests.e2e.conftest import create_target, inference_service
from tests.e2e.kserve_isvc import KServeISVCStack, pod_of_template
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    exists,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.test_isvc_runtime_offload import settled_template, template
from tests.e2e.test_operator_apply import POLICY as STACK_POLICY
from tests.pod_security import USER_CONTAINER_SECURITY, restricted_target, restricted_violations

POLICY: dict[str, Any] = {
    **STACK_POLICY,
    "eviction": {"highWatermark": 0.9, "protectSeconds": 120},
}
LLAMA_PVC = "pvc://models/llama-3-1-70b"
MODEL = {"name": "llama-3.1-70b"}  # a model on a PVC has no name kvtier can read
USER_INIT = {
    "name": "fetch-templates",
    "image": "busybox",
    "command": ["true"],
    "securityContext": USER_CONTAINER_SECURITY,
}
# Each target's predictor as the API server stored it, before kvtier wrote anything.
ORIGINAL: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def api(kserve_isvc_stack: KServeISVCStack) -> client.ApiClient:
    return kserve_isvc_stack.api


@pytest.fixture(scope="module")
def ns(api: client.ApiClient) -> Iterator[str]:
    """The module's namespace, under the module's policy; the stack's own policy again after
    it, and the namespace deleted (its services' pods hold no node for later modules)."""
    apply_policy(api, POLICY)
    name = new_namespace(api, "evictor")
    try:
        yield name
    finally:
        apply_policy(api, STACK_POLICY)
        client.CoreV1Api(api).delete_namespace(name)


def _user(name: str, replicas: int) -> dict[str, Any]:
    return restricted_target(
        inference_service(name, tp=4, model_uri=LLAMA_PVC, min_replicas=replicas)
    )


def _isvc(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    found = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", ns, "inferenceservices", name
    )
    return cast(dict[str, Any], found)


def _kserves_pod(stack: KServeISVCStack, ns: str, name: str) -> dict[str, Any]:
    """The pod of the Deployment KServe wrote from the service as kvtier left it."""
    applied = _isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
    flag = json.loads(applied)["kvTransferConfig"]
    return pod_of_template(stack.api, ns, name, settled_template(stack, ns, name, flag))


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _evictors(api: client.ApiClient, ns: str, tier: str) -> list[client.V1Deployment]:
    found = client.AppsV1Api(api).list_namespaced_deployment(
        ns, label_selector=f"{TIER_ID}={tier_id(ns, tier)}"
    )
    return list(found.items)


def _bind_cephfs_claim(api: client.ApiClient, ns: str, claim: str, size: str) -> None:
    """Play the CephFS provisioner: a PV for the claim (named: another module's claim on the
    shared cluster could take a free one), which the controller-manager binds."""
    client.CoreV1Api(api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"cephfs-{ns}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": size},
                access_modes=["ReadWriteMany"],
                storage_class_name="ocs-storagecluster-cephfs",
                persistent_volume_reclaim_policy="Delete",
                claim_ref=client.V1ObjectReference(namespace=ns, name=claim),
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"vol-{ns}"
                ),
            ),
        )
    )


def test_cephfs_tier_gets_a_restricted_evictor_deployment(
    kserve_isvc_stack: KServeISVCStack, api: client.ApiClient, ns: str
) -> None:
    ORIGINAL["shared"] = create_target(api, ns, _user("shared", 3))["spec"]["predictor"]
    create_tier(
        api,
        ns,
        "shared",
        {
            "targetRef": {"kind": "InferenceService", "name": "shared"},
            "model": MODEL,
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
            "cpu": {"size": "200Gi"},
            "disk": {"type": "CephFS", "cephfs": {"size": "2Ti"}},
            "probe": {"enabled": False},
        },
    )
    tier = wait_condition(api, ns, "shared", "Provisioned", "False", "ClaimPending")
    claim = next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    _bind_cephfs_claim(api, ns, claim, "2Ti")
    tier = wait_condition(api, ns, "shared", "Ready", "True", "Applied", timeout=90)

    [deployment] = eventually(lambda: _evictors(api, ns, "shared"), what="evictor")
    owner = deployment.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid) == ("KVCacheTier", "shared", tier["metadata"]["uid"])
    pod = deployment.spec.template.spec
    assert pod.volumes[0].persistent_volume_claim.claim_name == claim
    [container] = pod.containers
    assert container.command[:2] == ["kvtier", "evict"]
    assert int(_arg(container.command, "--capacity")) == quantity_bytes("2Ti")
    assert _arg(container.command, "--high") == "0.9"  # the policy's
    assert _arg(container.command, "--low") == "0.7"  # the built-in
    assert _arg(container.command, "--protect-seconds") == "120"
    assert container.resources.limits["memory"] and container.resources.requests["cpu"]
    assert container.security_context.read_only_root_filesystem is True
    effective = {e["field"]: e for e in tier["status"]["effective"]}
    assert effective["eviction.highWatermark"]["source"] == "Policy"

    # The ReplicaSet's pod passes the namespace's `restricted` admission.
    core = client.CoreV1Api(api)
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    eventually(
        lambda: core.list_namespaced_pod(ns, label_selector=selector).items,
        timeout=90,
        what="the evictor's pod created",
    )
    # The replicas share the claim: KServe's pods mount it, with no sidecar.
    spec = _kserves_pod(kserve_isvc_stack, ns, "shared")["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[KV_CACHE_VOLUME]["persistentVolumeClaim"]["claimName"] == claim
    assert EVICTOR not in {c["name"] for c in spec.get("initContainers") or []}


def test_nvme_tier_gets_the_native_sidecar(
    kserve_isvc_stack: KServeISVCStack, api: client.ApiClient, ns: str
) -> None:
    user = _user("local", 1)
    user["spec"]["predictor"]["initContainers"] = [USER_INIT]
    ORIGINAL["local"] = create_target(api, ns, user)["spec"]["predictor"]
    create_tier(
        api,
        ns,
        "local",
        {
            "targetRef": {"kind": "InferenceService", "name": "local"},
            "model": MODEL,
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 32},
            "cpu": {"size": "100Gi"},
            "disk": {"type": "NVMe", "nvme": {"pool": "local-nvme", "size": "1Ti"}},
            "probe": {"enabled": False},
        },
    )

    def sidecar() -> list[dict[str, Any]] | None:
        init = _isvc(api, ns, "local")["spec"]["predictor"].get("initContainers") or []
        return init if any(c["name"] == EVICTOR for c in init) else None

    init = eventually(sidecar, timeout=90, what="the evictor sidecar on the target")
    assert [c["name"] for c in init] == [USER_INIT["name"], EVICTOR]  # the user's kept
    evictor = init[1]
    assert evictor["restartPolicy"] == "Always"
    assert int(_arg(evictor["command"], "--capacity")) == quantity_bytes("1Ti")
    assert evictor["volumeMounts"][0]["mountPath"] == _arg(evictor["command"], "--dir")
    assert evictor["resources"]["limits"]["memory"]
    predictor = _isvc(api, ns, "local")["spec"]["predictor"]
    assert evictor["volumeMounts"][0]["name"] in {v["name"] for v in predictor["volumes"]}
    assert not _evictors(api, ns, "local")  # a per-pod volume: no Deployment

    # The pod KServe's Deployment produces exists in the restricted namespace (admitted),
    # with the user's init container, then the sidecar on its claim template.
    wait_condition(api, ns, "local", "Ready", "True", "Applied", timeout=90)
    spec = _kserves_pod(kserve_isvc_stack, ns, "local")["spec"]
    pod_init = spec["initContainers"]
    assert [c["name"] for c in pod_init] == [USER_INIT["name"], EVICTOR]
    assert pod_init[1]["restartPolicy"] == "Always"
    directory = _arg(pod_init[1]["command"], "--dir")
    [mount] = [m for m in pod_init[1]["volumeMounts"] if m["mountPath"] == directory]
    assert "ephemeral" in {v["name"]: v for v in spec["volumes"]}[mount["name"]]
    assert restricted_violations(spec) == []


def test_the_evictors_settle_without_writes_over_two_resyncs(
    kserve_isvc_stack: KServeISVCStack, api: client.ApiClient, ns: str
) -> None:
    """The API server's defaults on the Deployment and the InferenceService's init
    containers are no news, nor are KServe's own reconciles: once the two tiers settle, the
    operator writes nothing more, through two of its periodic passes over every tier."""
    wait_condition(api, ns, "local", "Applied", "True", timeout=90)
    time.sleep(3)
    names: list[str] = []
    stack = kserve_isvc_stack
    writes = audit.idle_writes(stack.cluster.audit_log, stack.operator, names=names, namespace=ns)
    assert sum(writes.values()) == 0, names


def test_deleting_the_tiers_removes_the_evictors_and_restores_the_targets(
    kserve_isvc_stack: KServeISVCStack, api: client.ApiClient, ns: str
) -> None:
    assert set(ORIGINAL) == {"shared", "local"}
    tiered = template(kserve_isvc_stack, ns, "local")
    assert EVICTOR in {c["name"] for c in tiered["spec"]["initContainers"]}
    custom = client.CustomObjectsApi(api)
    for name in ORIGINAL:
        custom.delete_namespaced_custom_object("kvcache.io", "v1alpha1", ns, "kvcachetiers", name)
    for name, original in ORIGINAL.items():
        eventually(lambda: not exists(lambda: get_tier(api, ns, name)), what=name)  # noqa: B023
        assert _isvc(api, ns, name)["spec"]["predictor"] == original, name
    eventually(lambda: not _evictors(api, ns, "shared"), timeout=60, what="the Deployment gone")

    def users_init() -> bool:
        init = template(kserve_isvc_stack, ns, "local")["spec"]["initContainers"]
        return [c["name"] for c in init] == [USER_INIT["name"]]

    eventually(users_init, timeout=60, what="KServe's template with the user's init only")
