"""The replica-1 CephFS pool against Rook's real CRDs (deploy/examples/crds.yaml of
github.com/rook/rook, installed by install_crds): only the KVCachePolicy makes kvtier create
a CephFilesystem of its own with a size-1 data pool; its StorageClass appears only once the
file system reports `status.phase: Ready` (the test plays the Rook operator: a status write
by another field manager); CephFS tiers then claim from it; a foreign CephFilesystem (ODF's
own) is never written; a missing Ceph namespace is reported; switching the setting off
removes what kvtier made.

The ODF layout: namespace openshift-storage, with a clusterID as on a cluster upgraded from
before 4.19 (a policy setting) to see it reach the class.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.kube.rest import Kube
from tests.e2e.conftest import create_target, inference_service
from tests.e2e.kube_helpers import (
    GROUP,
    VERSION,
    apply_policy,
    create_restricted_namespace,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
)
from tests.e2e.operator_process import OperatorProcess

CEPH_NS = "openshift-storage"
FS = "kvtier-kvcache"
FOREIGN_FS = "ocs-storagecluster-cephfilesystem"
CLASS = "kvtier-cephfs-replica1"
CLUSTER_ID = "5b53ada3302d6e0d1025a7948ce45ba5"
REPLICA1: dict[str, Any] = {
    "enabled": True,
    "cephClusterNamespace": CEPH_NS,
    "filesystemName": FS,
    "poolName": "kvcache",
    "storageClassName": CLASS,
    "clusterID": CLUSTER_ID,
}


def policy(**replica1: Any) -> dict[str, Any]:
    return {
        "cephfs": {
            "storageClassName": "ocs-storagecluster-cephfs",
            "replica1": {**REPLICA1, **replica1},
        }
    }


def filesystem(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "ceph.rook.io", "v1", CEPH_NS, "cephfilesystems", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return cast(dict[str, Any], obj)


def storage_class(api: client.ApiClient, name: str = CLASS) -> client.V1StorageClass | None:
    try:
        return client.StorageV1Api(api).read_storage_class(name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def policy_condition(api: client.ApiClient) -> dict[str, Any] | None:
    obj = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, "kvcachepolicies", "cluster"
        ),
    )
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == "Replica1PoolReady":
            return dict(c)
    return None


def wait_policy_condition(api: client.ApiClient, status: str, reason: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        c = policy_condition(api)
        return c if c and (c["status"], c["reason"]) == (status, reason) else None

    found: dict[str, Any] = eventually(check, what=f"Replica1PoolReady={status} {reason}")
    return found


def play_rook(api: client.ApiClient, name: str, phase: str) -> None:
    """What the Rook operator does once the pools and MDS run: set status.phase (a merge
    patch of the status subresource, field manager rook-ceph-operator)."""
    Kube(api).request(
        "PATCH",
        f"/apis/ceph.rook.io/v1/namespaces/{CEPH_NS}/cephfilesystems/{name}/status",
        {"status": {"phase": phase}},
        content_type="application/merge-patch+json",
        query={"fieldManager": "rook-ceph-operator"},
    )


def managers(obj: dict[str, Any]) -> set[str]:
    return {str(m.get("manager")) for m in obj["metadata"].get("managedFields") or []}


@pytest.fixture(scope="module")
def ceph(admin_api: client.ApiClient, operator: OperatorProcess) -> dict[str, Any]:
    """The Ceph cluster's namespace with ODF's own file system, applied by ocs-operator."""
    create_restricted_namespace(admin_api, CEPH_NS)
    body = {
        "apiVersion": "ceph.rook.io/v1",
        "kind": "CephFilesystem",
        "metadata": {"name": FOREIGN_FS, "namespace": CEPH_NS},
        "spec": {
            "metadataPool": {"replicated": {"size": 3}},
            "dataPools": [{"name": "data0", "replicated": {"size": 3}}],
            "metadataServer": {"activeCount": 1, "activeStandby": True},
        },
    }
    Kube(admin_api).request(
        "PATCH",
        f"/apis/ceph.rook.io/v1/namespaces/{CEPH_NS}/cephfilesystems/{FOREIGN_FS}",
        json.dumps(body),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "ocs-operator"},
    )
    play_rook(admin_api, FOREIGN_FS, "Ready")
    foreign = filesystem(admin_api, FOREIGN_FS)
    assert foreign is not None
    return foreign


def assert_foreign_untouched(api: client.ApiClient, before: dict[str, Any]) -> None:
    now = filesystem(api, FOREIGN_FS)
    assert now is not None
    assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert now["spec"]["dataPools"] == [{"name": "data0", "replicated": {"size": 3}}]
    assert "kvtier-operator" not in managers(now)


def test_the_class_waits_for_kvtiers_own_filesystem_to_be_ready(
    admin_api: client.ApiClient, ceph: dict[str, Any]
) -> None:
    apply_policy(admin_api, policy())
    fs = eventually(lambda: filesystem(admin_api, FS), what="kvtier's CephFilesystem")
    assert fs["metadata"]["labels"]["kvcache.io/cephfs-replica1"] == "true"
    assert managers(fs) == {"kvtier-operator"}
    spec = fs["spec"]
    assert spec["metadataPool"]["replicated"]["size"] == 3
    assert spec["dataPools"] == [
        {"name": "kvcache", "replicated": {"size": 1, "requireSafeReplicaSize": False}}
    ]
    assert spec["metadataServer"]["activeCount"] == 1
    assert spec["metadataServer"]["activeStandby"] is True
    waiting = wait_policy_condition(admin_api, "False", "WaitingForFilesystem")
    assert f"{CEPH_NS}/{FS}" in waiting["message"] and CLASS in waiting["message"]
    # Not Ready yet: no class, however long it takes.
    time.sleep(3)
    assert storage_class(admin_api) is None

    play_rook(admin_api, FS, "Ready")
    sc = eventually(lambda: storage_class(admin_api), what="the replica-1 StorageClass")
    assert sc.provisioner == "openshift-storage.cephfs.csi.ceph.com"
    assert sc.parameters["clusterID"] == CLUSTER_ID
    assert sc.parameters["fsName"] == FS
    assert sc.parameters["pool"] == f"{FS}-kvcache"  # Rook's <fsName>-<poolName>
    assert sc.parameters["csi.storage.k8s.io/node-stage-secret-namespace"] == CEPH_NS
    ready = wait_policy_condition(admin_api, "True", "Ready")
    assert f"{FS}-kvcache" in ready["message"]
    # Rook's status write stays Rook's: kvtier owns only its spec fields.
    fs = filesystem(admin_api, FS)
    assert fs is not None and fs["status"]["phase"] == "Ready"
    assert managers(fs) == {"kvtier-operator", "rook-ceph-operator"}
    assert_foreign_untouched(admin_api, ceph)


def test_cephfs_tiers_claim_from_the_replica1_class(
    admin_api: client.ApiClient, ceph: dict[str, Any]
) -> None:
    eventually(lambda: storage_class(admin_api), what="the replica-1 StorageClass")
    ns = new_namespace(admin_api, "replica1")
    create_target(
        admin_api,
        ns,
        inference_service(
            "llama", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct", min_replicas=2
        ),
    )
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "llama"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
            "cpu": {"size": "100Gi"},
            "disk": {"type": "CephFS"},
            "probe": {"enabled": False},
        },
    )
    claim = eventually(
        lambda: next(
            (
                t.get("claimName")
                for t in (get_tier(admin_api, ns, "llama").get("status") or {}).get("tiers") or []
                if t["name"] == "cephfs"
            ),
            None,
        ),
        what="the CephFS claim",
    )
    pvc = client.CoreV1Api(admin_api).read_namespaced_persistent_volume_claim(claim, ns)
    assert pvc.spec.storage_class_name == CLASS
    assert pvc.spec.access_modes == ["ReadWriteMany"]
    plan = get_tier(admin_api, ns, "llama")["status"]["plan"]["summary"]
    assert f"the KVCachePolicy provides CephFilesystem {FS}" in plan
    assert_foreign_untouched(admin_api, ceph)


def test_a_foreign_filesystem_is_never_taken_over(
    admin_api: client.ApiClient, ceph: dict[str, Any]
) -> None:
    # Naming ODF's own file system must not add a pool to it (its dataPools is atomic).
    apply_policy(admin_api, policy(filesystemName=FOREIGN_FS, storageClassName="kvtier-r1-b"))
    c = wait_policy_condition(admin_api, "False", "FilesystemNotOwned")
    assert FOREIGN_FS in c["message"]
    # The old file system and class were kvtier's: they go, as the policy no longer names them.
    eventually(lambda: filesystem(admin_api, FS) is None or None, what="the old fs deleted")
    eventually(lambda: storage_class(admin_api) is None or None, what="the old class deleted")
    assert storage_class(admin_api, "kvtier-r1-b") is None
    assert_foreign_untouched(admin_api, ceph)


def test_a_missing_ceph_namespace_is_reported(
    admin_api: client.ApiClient, ceph: dict[str, Any]
) -> None:
    apply_policy(admin_api, policy(cephClusterNamespace="no-ceph-here"))
    c = wait_policy_condition(admin_api, "False", "CephClusterNotFound")
    assert "no namespace no-ceph-here" in c["message"]
    assert_foreign_untouched(admin_api, ceph)


def test_switching_it_off_removes_what_kvtier_made(
    admin_api: client.ApiClient, ceph: dict[str, Any], operator: OperatorProcess
) -> None:
    apply_policy(admin_api, policy())
    eventually(lambda: filesystem(admin_api, FS), what="kvtier's CephFilesystem")
    play_rook(admin_api, FS, "Ready")
    eventually(lambda: storage_class(admin_api), what="the replica-1 StorageClass")
    apply_policy(admin_api, policy(enabled=False))
    # No Rook here to hold the CR while volumes live in it: both go at once.
    try:
        eventually(lambda: filesystem(admin_api, FS) is None or None, what="the fs deleted")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; operator: {operator.load()}") from exc
    eventually(lambda: storage_class(admin_api) is None or None, what="the class deleted")
    eventually(lambda: policy_condition(admin_api) is None or None, what="condition gone")
    assert_foreign_untouched(admin_api, ceph)
