"""The replica-1 CephFS pool: only the KVCachePolicy makes kvtier add it to the ODF
StorageCluster (a project-written stand-in CRD here) beside the pools others own, with a
StorageClass whose `pool` names it; CephFS tiers then claim from that class."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes import client

from kvtier.kube.rest import Kube
from tests.e2e.conftest import create_target, inference_service
from tests.e2e.kube_helpers import apply_policy, create_tier, eventually, get_tier, new_namespace
from tests.e2e.operator_process import OperatorProcess

ODF_NS = "openshift-storage"
POLICY: dict[str, Any] = {
    "cephfs": {
        "storageClassName": "ocs-storagecluster-cephfs",
        "replica1": {
            "enabled": True,
            "storageCluster": {"name": "ocs-storagecluster", "namespace": ODF_NS},
            "poolName": "kvcache",
            "storageClassName": "kvtier-cephfs-replica1",
        },
    },
}


def storage_cluster(api: client.ApiClient) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "ocs.openshift.io", "v1", ODF_NS, "storageclusters", "ocs-storagecluster"
    )
    return cast(dict[str, Any], obj)


@pytest.fixture(scope="module")
def odf(admin_api: client.ApiClient, operator: OperatorProcess) -> None:
    client.CoreV1Api(admin_api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=ODF_NS))
    )
    # The ODF operator's own pool, applied by its own field manager.
    body = {
        "apiVersion": "ocs.openshift.io/v1",
        "kind": "StorageCluster",
        "metadata": {"name": "ocs-storagecluster", "namespace": ODF_NS},
        "spec": {
            "managedResources": {
                "cephFilesystems": {
                    "additionalDataPools": [{"name": "ssd", "replicated": {"size": 3}}]
                }
            }
        },
    }
    Kube(admin_api).request(
        "PATCH",
        f"/apis/ocs.openshift.io/v1/namespaces/{ODF_NS}/storageclusters/ocs-storagecluster",
        json.dumps(body),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "ocs-operator"},
    )


def test_policy_adds_the_replica1_pool_and_its_class(
    admin_api: client.ApiClient, odf: None
) -> None:
    apply_policy(admin_api, POLICY)

    def pools() -> dict[str, Any] | None:
        spec = storage_cluster(admin_api)["spec"]["managedResources"]["cephFilesystems"]
        found = {p["name"]: p for p in spec["additionalDataPools"]}
        return found if "kvcache" in found else None

    found = eventually(pools, what="the kvcache data pool")
    assert found["kvcache"]["replicated"]["size"] == 1
    assert found["ssd"]["replicated"]["size"] == 3  # the ODF operator's pool is untouched
    sc = eventually(
        lambda: client.StorageV1Api(admin_api).read_storage_class("kvtier-cephfs-replica1"),
        what="the replica-1 StorageClass",
    )
    assert sc.parameters["pool"] == "ocs-storagecluster-cephfilesystem-kvcache"
    assert sc.parameters["fsName"] == "ocs-storagecluster-cephfilesystem"
    assert sc.provisioner == "openshift-storage.cephfs.csi.ceph.com"


def test_cephfs_tiers_claim_from_the_replica1_class(admin_api: client.ApiClient, odf: None) -> None:
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
    assert pvc.spec.storage_class_name == "kvtier-cephfs-replica1"
    assert pvc.spec.access_modes == ["ReadWriteMany"]
