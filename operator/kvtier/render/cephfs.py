"""Shared CephFS tier: one RWX claim per tier, and (when the policy enables it) the replica-1
data pool with the StorageClass that places volumes on it.

The pool and its class are cluster-wide and shared by every CephFS tier, so they derive only
from the KVCachePolicy's settings: `replica1_writes` reads policy-sourced fields only.
"""

from __future__ import annotations

from typing import Any

from kvtier.api.policy import Retention
from kvtier.policy.effective import CephPoolOwner, EffectiveSettings
from kvtier.render.labels import TierRef, managed_labels, owner_references, tier_labels
from kvtier.render.naming import cephfs_claim_name
from kvtier.render.quantities import round_up, to_quantity
from kvtier.render.result import DesiredWrite
from kvtier.sizing import Sizing

STORAGE_CLUSTER_API = "ocs.openshift.io/v1"
CEPH_FILESYSTEM_API = "ceph.rook.io/v1"
# ODF/Rook CSI secrets, created by the operator of the Ceph cluster in its namespace.
_PROVISIONER_SECRET = "rook-csi-cephfs-provisioner"
_NODE_SECRET = "rook-csi-cephfs-node"


def cephfs_size_bytes(requested: int | None, sizing: Sizing) -> int:
    """spec.disk.cephfs.size, else the working set of all replicas (they share the volume)
    rounded up to whole GiB."""
    if requested is not None:
        return requested
    return round_up(sizing.working_set_bytes_all_replicas)


def cephfs_storage_class_name(settings: EffectiveSettings) -> str:
    """The replica-1 class when the policy enables the pool, else the CephFS class."""
    if settings.replica1_enabled.value:
        return settings.replica1_storage_class.value
    return settings.cephfs_storage_class.value


def cephfs_claim(
    tier: TierRef, storage_class: str, size_bytes: int, retention: Retention
) -> DesiredWrite:
    """The RWX claim all replicas mount. It is owned by the KVCacheTier (garbage-collected
    with it) only when retention is Delete; with Retain it stays and keeps its labels."""
    name = cephfs_claim_name(tier.name)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": tier.namespace,
        "labels": tier_labels(tier),
    }
    owners = owner_references(tier) if retention is Retention.DELETE else []
    if owners:
        metadata["ownerReferences"] = owners
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "volumeMode": "Filesystem",
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": to_quantity(size_bytes)}},
        },
    }
    return DesiredWrite(
        "Apply",
        "v1",
        "PersistentVolumeClaim",
        name,
        tier.namespace,
        body,
        f"PersistentVolumeClaim {tier.namespace}/{name}: {to_quantity(size_bytes)} CephFS "
        f"(ReadWriteMany, class {storage_class}) shared by all replicas",
    )


def ceph_filesystem_name(owner: CephPoolOwner) -> str:
    """The Ceph file system: ODF names it <StorageCluster>-cephfilesystem; a Rook
    CephFilesystem is the file system itself."""
    if owner.kind == "StorageCluster":
        return f"{owner.name}-cephfilesystem"
    return owner.name


def replica1_pool_patch(owner: CephPoolOwner, pool_name: str) -> DesiredWrite:
    """Apply body adding the size-1 data pool to the ODF StorageCluster or Rook
    CephFilesystem. Both lists are keyed by name, so the entry merges beside existing pools."""
    spec: dict[str, Any]
    if owner.kind == "StorageCluster":
        api_version = STORAGE_CLUSTER_API
        pool = {"name": pool_name, "replicated": {"size": 1}}
        spec = {"managedResources": {"cephFilesystems": {"additionalDataPools": [pool]}}}
    else:
        api_version = CEPH_FILESYSTEM_API
        # Rook refuses size 1 unless told the risk is accepted (Ceph also needs
        # mon_allow_pool_size_one): losing an OSD loses only cache here.
        pool = {"name": pool_name, "replicated": {"size": 1, "requireSafeReplicaSize": False}}
        spec = {"dataPools": [pool]}
    body = {
        "apiVersion": api_version,
        "kind": owner.kind,
        "metadata": {"name": owner.name, "namespace": owner.namespace},
        "spec": spec,
    }
    return DesiredWrite(
        "Apply",
        api_version,
        owner.kind,
        owner.name,
        owner.namespace,
        body,
        f"{owner.kind} {owner.namespace}/{owner.name}: add data pool {pool_name} with replica "
        f"size 1 (Ceph pool {ceph_filesystem_name(owner)}-{pool_name}; an OSD loss only "
        "costs cache misses)",
    )


def replica1_storage_class(owner: CephPoolOwner, pool_name: str, class_name: str) -> DesiredWrite:
    """A CephFS StorageClass whose `pool` parameter places volumes on the replica-1 pool."""
    fs_name = ceph_filesystem_name(owner)
    ns = owner.namespace
    parameters = {
        "clusterID": ns,
        "fsName": fs_name,
        "pool": f"{fs_name}-{pool_name}",
        "csi.storage.k8s.io/provisioner-secret-name": _PROVISIONER_SECRET,
        "csi.storage.k8s.io/provisioner-secret-namespace": ns,
        "csi.storage.k8s.io/controller-expand-secret-name": _PROVISIONER_SECRET,
        "csi.storage.k8s.io/controller-expand-secret-namespace": ns,
        "csi.storage.k8s.io/node-stage-secret-name": _NODE_SECRET,
        "csi.storage.k8s.io/node-stage-secret-namespace": ns,
    }
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": class_name, "labels": managed_labels()},
        # The CSI driver is named after the namespace of the Ceph cluster.
        "provisioner": f"{ns}.cephfs.csi.ceph.com",
        "parameters": parameters,
        "reclaimPolicy": "Delete",
        "allowVolumeExpansion": True,
        "volumeBindingMode": "Immediate",
    }
    return DesiredWrite(
        "Apply",
        "storage.k8s.io/v1",
        "StorageClass",
        class_name,
        None,
        body,
        f"StorageClass {class_name}: CephFS on pool {fs_name}-{pool_name} (replica size 1)",
    )


def replica1_writes(settings: EffectiveSettings) -> list[DesiredWrite]:
    """The pool, then its class; nothing when the policy does not enable the pool."""
    if not settings.replica1_enabled.value:
        return []
    owner = settings.replica1_owner.value
    pool = settings.replica1_pool_name.value
    return [
        replica1_pool_patch(owner, pool),
        replica1_storage_class(owner, pool, settings.replica1_storage_class.value),
    ]
