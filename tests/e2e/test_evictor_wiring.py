"""The operator runs the evictor beside every disk tier it provisions, on the real control
plane with the real KServe CRDs, in a Pod Security `restricted` namespace: a CephFS tier gets
its Deployment (whose ReplicaSet's pod is admitted), an NVMe tier's InferenceService gets
the native sidecar beside the user's own init container, and deleting the tiers removes
both and gives the user's target back exactly."""

from __future__ import annotations

import copy
import time
from typing import Any, cast

import pytest
from kubernetes import client

from kvtier.api.common import quantity_bytes
from kvtier.names.labels import TIER_ID
from kvtier.names.objects import EVICTOR_CONTAINER as CONTAINER
from kvtier.names.objects import tier_id
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.conftest import create_target, inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    as_restricted_user,
    create_tier,
    eventually,
    exists,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": "local-nvme",
            "mountPath": "/var/mnt/nvme",
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
            "volumeSource": "Local",
        }
    ],
    "cephfs": {"storageClassName": "ocs-storagecluster-cephfs"},
    "eviction": {"highWatermark": 0.9, "protectSeconds": 120},
}
LLAMA = "hf://meta-llama/Llama-3.1-70B-Instruct"
USER_INIT = {"name": "fetch-templates", "image": "busybox", "command": ["true"]}
# Each target's predictor as the API server stored it, before kvtier wrote anything.
ORIGINAL: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "evictor")


def _isvc(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    found = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", ns, "inferenceservices", name
    )
    return cast(dict[str, Any], found)


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _evictors(api: client.ApiClient, ns: str, tier: str) -> list[client.V1Deployment]:
    found = client.AppsV1Api(api).list_namespaced_deployment(
        ns, label_selector=f"{TIER_ID}={tier_id(ns, tier)}"
    )
    return list(found.items)


def _bind_cephfs_claim(api: client.ApiClient, ns: str, size: str) -> None:
    """Play the CephFS provisioner: a matching PV the controller-manager binds."""
    client.CoreV1Api(api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"cephfs-{ns}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": size},
                access_modes=["ReadWriteMany"],
                storage_class_name="ocs-storagecluster-cephfs",
                persistent_volume_reclaim_policy="Delete",
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"vol-{ns}"
                ),
            ),
        )
    )


def test_cephfs_tier_gets_a_restricted_evictor_deployment(
    admin_api: client.ApiClient, ns: str
) -> None:
    user = inference_service("shared", tp=4, model_uri=LLAMA, min_replicas=3)
    ORIGINAL["shared"] = create_target(admin_api, ns, user)["spec"]["predictor"]
    create_tier(
        admin_api,
        ns,
        "shared",
        {
            "targetRef": {"kind": "InferenceService", "name": "shared"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
            "cpu": {"size": "200Gi"},
            "disk": {"type": "CephFS", "cephfs": {"size": "2Ti"}},
            "probe": {"enabled": False},
        },
    )
    tier = wait_condition(admin_api, ns, "shared", "Provisioned", "False", "ClaimPending")
    claim = next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    _bind_cephfs_claim(admin_api, ns, "2Ti")
    tier = wait_condition(admin_api, ns, "shared", "Ready", "True", "Applied", timeout=90)

    [deployment] = eventually(lambda: _evictors(admin_api, ns, "shared"), what="evictor")
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
    core = client.CoreV1Api(admin_api)
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    eventually(
        lambda: core.list_namespaced_pod(ns, label_selector=selector).items,
        timeout=90,
        what="the evictor's pod created",
    )
    # The replicas share the claim: no sidecar in their pods.
    assert "initContainers" not in _isvc(admin_api, ns, "shared")["spec"]["predictor"]


def test_nvme_tier_gets_the_native_sidecar(admin_api: client.ApiClient, ns: str) -> None:
    user = inference_service("local", tp=4, model_uri=LLAMA)
    user["spec"]["predictor"]["initContainers"] = [USER_INIT]
    ORIGINAL["local"] = create_target(admin_api, ns, user)["spec"]["predictor"]
    create_tier(
        admin_api,
        ns,
        "local",
        {
            "targetRef": {"kind": "InferenceService", "name": "local"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 32},
            "cpu": {"size": "100Gi"},
            "disk": {"type": "NVMe", "nvme": {"pool": "local-nvme", "size": "1Ti"}},
            "probe": {"enabled": False},
        },
    )

    def sidecar() -> list[dict[str, Any]] | None:
        init = _isvc(admin_api, ns, "local")["spec"]["predictor"].get("initContainers") or []
        return init if any(c["name"] == CONTAINER for c in init) else None

    init = eventually(sidecar, timeout=90, what="the evictor sidecar on the target")
    assert [c["name"] for c in init] == [USER_INIT["name"], CONTAINER]  # the user's kept
    evictor = init[1]
    assert evictor["restartPolicy"] == "Always"
    assert int(_arg(evictor["command"], "--capacity")) == quantity_bytes("1Ti")
    assert evictor["volumeMounts"][0]["mountPath"] == _arg(evictor["command"], "--dir")
    assert evictor["resources"]["limits"]["memory"]
    predictor = _isvc(admin_api, ns, "local")["spec"]["predictor"]
    assert evictor["volumeMounts"][0]["name"] in {v["name"] for v in predictor["volumes"]}
    assert not _evictors(admin_api, ns, "local")  # a per-pod volume: no Deployment

    # The pod KServe would make of the patched predictor passes `restricted` admission.
    container = {**predictor["model"], "name": "kserve-container", "image": "vllm/vllm-openai"}
    for key in ("modelFormat", "storageUri"):
        container.pop(key)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "local-0"},
        "spec": {
            "initContainers": copy.deepcopy(predictor["initContainers"]),
            "containers": [container],
            "volumes": predictor["volumes"],
        },
    }
    core = client.CoreV1Api(admin_api)
    created = core.create_namespaced_pod(ns, as_restricted_user(pod))  # type: ignore[arg-type]
    assert created.spec.init_containers[1].restart_policy == "Always"


def test_the_evictors_settle_without_writes_over_two_resyncs(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    """The API server's defaults on the Deployment and the InferenceService's init
    containers are no news: once the two tiers settle, the operator writes nothing more,
    through two of its periodic passes over every tier."""
    wait_condition(admin_api, ns, "local", "Applied", "True", timeout=90)
    time.sleep(3)
    names: list[str] = []
    writes = audit.idle_writes(cluster.audit_log, operator, names=names, namespace=ns)
    assert sum(writes.values()) == 0, names


def test_deleting_the_tiers_removes_the_evictors_and_restores_the_targets(
    admin_api: client.ApiClient, ns: str
) -> None:
    assert set(ORIGINAL) == {"shared", "local"}
    custom = client.CustomObjectsApi(admin_api)
    for name in ORIGINAL:
        custom.delete_namespaced_custom_object("kvcache.io", "v1alpha1", ns, "kvcachetiers", name)
    for name, original in ORIGINAL.items():
        eventually(lambda: not exists(lambda: get_tier(admin_api, ns, name)), what=name)  # noqa: B023
        assert _isvc(admin_api, ns, name)["spec"]["predictor"] == original, name
    eventually(
        lambda: not _evictors(admin_api, ns, "shared"), timeout=60, what="the Deployment gone"
    )
