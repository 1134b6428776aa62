"""NVMe PersistentVolumes and class, CephFS claim, replica-1 pool and class."""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.api.policy import KVCachePolicySpec, Retention, VolumeSource
from kvtier.api.tier import KVCacheTierSpec
from kvtier.names.labels import MANAGED_BY, NVME_POOL, RETENTION, TIER_ID, TierRef
from kvtier.render.result import RenderError
from kvtier.settings import NVMePoolSettings, effective_settings
from kvtier.sizing import SizingInput, lookup_model, plan
from kvtier.tiers.cephfs import (
    REPLICA1,
    cephfs_claim,
    cephfs_size_bytes,
    cephfs_storage_class_name,
    replica1_writes,
)
from kvtier.tiers.nvme import (
    eligible_nodes,
    nvme_capacity_bytes,
    nvme_claim_spec,
    nvme_storage_class,
    nvme_volume,
    nvme_volumes,
    recycle_released_volumes,
)

TiB = 1 << 40
GiB = 1 << 30
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
TIER = TierRef("llm", "llama70b", "uid-1")


def _pool(**changes: Any) -> NVMePoolSettings:
    base: dict[str, Any] = {
        "name": "local-nvme",
        "mount_path": "/var/mnt/nvme",
        "node_selector": H100,
        "capacity_per_node_bytes": 3 * TiB,
        "volume_source": VolumeSource.LOCAL,
        "retention": Retention.DELETE,
    }
    return NVMePoolSettings(**{**base, **changes})


def _node(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}, **meta}}


NODES = [
    _node("gpu-node-2", {**H100, "kubernetes.io/hostname": "gpu-node-2"}),
    _node("cpu-node-1", {"kubernetes.io/hostname": "cpu-node-1"}),
    _node("gpu-node-1", {**H100, "kubernetes.io/hostname": "ip-10-0-0-1"}),
    _node("gpu-node-3", H100, deletionTimestamp="2026-01-01T00:00:00Z"),
]


def test_eligible_nodes_match_selector_sorted_and_skip_deleting() -> None:
    names = [n["metadata"]["name"] for n in eligible_nodes(NODES, H100)]
    assert names == ["gpu-node-1", "gpu-node-2"]
    assert len(eligible_nodes(NODES, {})) == 3


def test_one_local_pv_per_eligible_node_with_affinity() -> None:
    writes = nvme_volumes(TIER, _pool(), NODES, TiB)
    assert [w.kind for w in writes] == ["PersistentVolume"] * 2
    assert len({w.name for w in writes}) == 2
    for write, hostname in zip(writes, ["ip-10-0-0-1", "gpu-node-2"], strict=True):
        assert write.namespace is None
        spec = write.body["spec"]
        assert spec["local"] == {"path": "/var/mnt/nvme"}
        assert "hostPath" not in spec
        assert spec["capacity"] == {"storage": "1Ti"}
        assert spec["accessModes"] == ["ReadWriteOnce"]
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"
        assert spec["storageClassName"] == "kvtier-nvme-local-nvme"
        terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms == [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}
                ]
            }
        ]
        meta = write.body["metadata"]
        assert meta["labels"][TIER_ID] == TIER.id
        assert meta["labels"][NVME_POOL] == "local-nvme"
        assert meta["labels"][MANAGED_BY] == "kvtier"
        assert meta["annotations"] == {RETENTION: "Delete"}
    assert "gpu-node-1" in writes[0].summary and "/var/mnt/nvme" in writes[0].summary


def test_no_eligible_node_is_an_error() -> None:
    with pytest.raises(RenderError) as err:
        nvme_volumes(TIER, _pool(node_selector={"x": "y"}), NODES, TiB)
    assert err.value.reason == "NoEligibleNodes"


def test_capacity_from_tier_or_pool() -> None:
    assert nvme_capacity_bytes(None, _pool()) == 3 * TiB
    assert nvme_capacity_bytes(TiB, _pool()) == TiB
    with pytest.raises(RenderError) as err:
        nvme_capacity_bytes(4 * TiB, _pool())
    assert err.value.reason == "NVMeSizeExceedsPool"


def test_storage_class_has_no_provisioner_and_waits() -> None:
    write = nvme_storage_class(_pool())
    assert write.name == "kvtier-nvme-local-nvme" and write.namespace is None
    assert write.body["provisioner"] == "kubernetes.io/no-provisioner"
    assert write.body["volumeBindingMode"] == "WaitForFirstConsumer"
    assert TIER_ID not in write.body["metadata"]["labels"]  # shared by tiers


def test_claim_spec_selects_only_this_tiers_pvs() -> None:
    spec = nvme_claim_spec(TIER, _pool(), TiB)
    assert spec["storageClassName"] == "kvtier-nvme-local-nvme"
    assert spec["resources"] == {"requests": {"storage": "1Ti"}}
    assert spec["selector"] == {"matchLabels": {TIER_ID: TIER.id, NVME_POOL: "local-nvme"}}
    pv_labels = nvme_volume(TIER, _pool(), NODES[0], TiB).body["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= pv_labels.items()
    other = nvme_volume(TierRef("llm", "other"), _pool(), NODES[0], TiB)
    assert not spec["selector"]["matchLabels"].items() <= other.body["metadata"]["labels"].items()


def test_released_pvs_are_recycled() -> None:
    pv = nvme_volume(TIER, _pool(), NODES[0], TiB).body
    released = {**pv, "status": {"phase": "Released"}}
    bound = {**pv, "status": {"phase": "Bound"}}
    foreign = {"metadata": {"name": "x", "labels": {}}, "status": {"phase": "Released"}}
    deletes = recycle_released_volumes([released, bound, foreign])
    assert [(d.action, d.kind, d.name) for d in deletes] == [
        ("Delete", "PersistentVolume", pv["metadata"]["name"])
    ]


# --- CephFS -------------------------------------------------------------------------------------


def test_cephfs_claim_rwx_labels_owner() -> None:
    write = cephfs_claim(TIER, "ocs-storagecluster-cephfs", 2 * TiB, Retention.DELETE)
    assert (write.kind, write.name, write.namespace) == (
        "PersistentVolumeClaim",
        "kvtier-llama70b-cephfs",
        "llm",
    )
    spec = write.body["spec"]
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["storageClassName"] == "ocs-storagecluster-cephfs"
    assert spec["resources"] == {"requests": {"storage": "2Ti"}}
    meta = write.body["metadata"]
    assert meta["labels"][TIER_ID] == TIER.id
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    kept = cephfs_claim(TIER, "c", TiB, Retention.RETAIN)
    assert "ownerReferences" not in kept.body["metadata"]


def test_cephfs_size_from_spec_or_all_replicas() -> None:
    sizing = plan(
        SizingInput(
            geometry=lookup_model("gpt-oss-120b"),
            average_context_tokens=50_000,
            concurrent_sessions=128,
            replicas=3,
            tensor_parallel_size=2,
        )
    ).sizing
    assert cephfs_size_bytes(2 * TiB, sizing) == 2 * TiB
    auto = cephfs_size_bytes(None, sizing)
    assert auto >= sizing.working_set_bytes_all_replicas and auto % GiB == 0
    assert auto - sizing.working_set_bytes_all_replicas < GiB


def _tier_spec(**disk: Any) -> KVCacheTierSpec:
    return KVCacheTierSpec.model_validate(
        {
            "targetRef": {"kind": "LLMInferenceService", "name": "x"},
            "workload": {"averageContextTokens": 1000, "concurrentSessions": 1},
            "disk": {"type": "CephFS", **disk},
        }
    )


def _policy(**cephfs: Any) -> KVCachePolicySpec:
    return KVCachePolicySpec.model_validate({"cephfs": cephfs})


def test_replica1_default_is_kvtiers_own_filesystem_on_odf() -> None:
    settings = effective_settings(_tier_spec(), _policy(replica1={"enabled": True}))
    fs, sc = replica1_writes(settings)
    assert (fs.api_version, fs.kind, fs.name, fs.namespace) == (
        "ceph.rook.io/v1",
        "CephFilesystem",
        "kvtier-kvcache",
        "openshift-storage",
    )
    assert fs.body["metadata"]["labels"] == {MANAGED_BY: "kvtier", REPLICA1: "true"}
    assert fs.body["spec"] == {
        "metadataPool": {"replicated": {"size": 3}},
        "dataPools": [
            {"name": "kvcache", "replicated": {"size": 1, "requireSafeReplicaSize": False}}
        ],
        "preserveFilesystemOnDelete": False,
        "preservePoolsOnDelete": False,
        "metadataServer": {"activeCount": 1, "activeStandby": True},
    }
    assert sc.name == "ocs-storagecluster-cephfs-kvcache" and sc.namespace is None
    assert sc.body["metadata"]["labels"] == {MANAGED_BY: "kvtier", REPLICA1: "true"}
    assert sc.body["provisioner"] == "openshift-storage.cephfs.csi.ceph.com"
    params = sc.body["parameters"]
    assert params["clusterID"] == "openshift-storage"
    assert params["fsName"] == "kvtier-kvcache"
    # Rook names a named data pool <fsName>-<poolName> (generateDataPoolNames).
    assert params["pool"] == "kvtier-kvcache-kvcache"
    assert params["csi.storage.k8s.io/provisioner-secret-namespace"] == "openshift-storage"
    assert params["csi.storage.k8s.io/node-stage-secret-name"] == "rook-csi-cephfs-node"
    assert cephfs_storage_class_name(settings) == sc.name


def test_replica1_on_plain_rook() -> None:
    policy = _policy(
        replica1={
            "enabled": True,
            "cephClusterNamespace": "rook-ceph",
            "filesystemName": "kvfs",
            "poolName": "kv",
            "storageClassName": "kv-r1",
            "csiDriver": "rook-operator.cephfs.csi.ceph.com",
            "clusterID": "my-cluster",
        }
    )
    fs, sc = replica1_writes(effective_settings(_tier_spec(), policy))
    assert (fs.name, fs.namespace) == ("kvfs", "rook-ceph")
    assert fs.body["spec"]["dataPools"][0]["name"] == "kv"
    assert sc.name == "kv-r1"
    assert sc.body["provisioner"] == "rook-operator.cephfs.csi.ceph.com"
    params = sc.body["parameters"]
    assert (params["pool"], params["fsName"], params["clusterID"]) == (
        "kvfs-kv",
        "kvfs",
        "my-cluster",
    )
    assert params["csi.storage.k8s.io/controller-expand-secret-namespace"] == "rook-ceph"


def test_replica1_depends_on_policy_only() -> None:
    policy = _policy(replica1={"enabled": True})
    a = replica1_writes(effective_settings(_tier_spec(), policy))
    b = replica1_writes(effective_settings(_tier_spec(cephfs={"size": "9Ti"}), policy))
    assert a == b


def test_replica1_disabled_writes_nothing() -> None:
    settings = effective_settings(_tier_spec(), None)
    assert replica1_writes(settings) == []
    assert cephfs_storage_class_name(settings) == "ocs-storagecluster-cephfs"
