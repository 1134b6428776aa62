"""The CephFS tier: one RWX claim per tier that every replica mounts, its evictor Deployment,
and (when the policy enables it) the replica-1 pool with the StorageClass that places volumes
on it.

The replica-1 pool is the one data pool of a Rook CephFilesystem that kvtier creates and owns
(`replica1_filesystem`), in the Ceph cluster's namespace. kvtier never adds a pool to a file
system another operator owns: Rook's CephFilesystem `spec.dataPools` and ODF's StorageCluster
`additionalDataPools` are atomic lists, so an apply of one entry either fails (409) or, forced,
drops that operator's pools; and ocs-operator sets `replicasPerFailureDomain: 1` on every
additional pool, which Rook refuses for size 1 ("size must be greater"). ODF runs Rook, so a
CephFilesystem of kvtier's own works on both.

Facts from Rook v1.18.11 (pkg/operator/ceph/file/filesystem.go, pkg/operator/ceph/pool/
validate.go; the pool specs are checked by Rook's own ValidatePoolSpec in
tests/e2e/test_rook_pools.py):
- a named data pool is created in Ceph as `<fsName>-<poolName>` (unless `preservePoolNames`,
  which kvtier never sets);
- a size-1 pool needs `requireSafeReplicaSize: false`, and its size must be greater than
  `replicasPerFailureDomain` (unset here);
- a CephFilesystem with `preserveFilesystemOnDelete`/`preservePoolsOnDelete` false loses its
  file system and pools with the CR, and Rook holds the deletion while subvolume groups still
  hold subvolumes (every CephFS CSI volume is one).
Rook's CephFS CSI driver is `<Rook operator namespace>.cephfs.csi.ceph.com`, and the
StorageClass clusterID is the cluster's namespace except on ODF clusters upgraded from before
4.19; both are policy settings with those defaults.

The file system and its class are cluster-wide and shared by every CephFS tier, so they derive
only from the KVCachePolicy's settings: `replica1_writes` reads policy-sourced fields only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.policy import KVCachePolicySpec, Retention
from kvtier.api.tier import KVCacheTierSpec
from kvtier.names.labels import TierRef, managed_labels, owner_references, tier_labels
from kvtier.names.objects import cephfs_claim_name, python_hash_seed
from kvtier.render.evictor import EvictorSettings, cephfs_evictor_deployment, cephfs_evictor_name
from kvtier.render.quantities import round_up, short_quantity, to_quantity
from kvtier.render.result import DesiredWrite
from kvtier.settings import EffectiveSettings
from kvtier.sizing import Sizing, SizingPlan
from kvtier.tiers.base import ProbeVolume, Provision, SharedClaim, TierRequest
from kvtier.tiers.common import evictor_settings

CEPH_FILESYSTEM_API = "ceph.rook.io/v1"
# Label on kvtier's replica-1 CephFilesystem and StorageClass (value "true").
REPLICA1 = "kvcache.io/cephfs-replica1"
METADATA_POOL_SIZE = 3
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


def replica1_ceph_pool(settings: EffectiveSettings) -> str:
    """The data pool's name in Ceph: Rook prefixes a named data pool with its file system."""
    return f"{settings.replica1_filesystem.value}-{settings.replica1_pool_name.value}"


def replica1_labels() -> dict[str, str]:
    """Labels of kvtier's replica-1 CephFilesystem and StorageClass: kvtier only ever
    changes or deletes objects that carry them."""
    return {**managed_labels(), REPLICA1: "true"}


def replica1_filesystem(settings: EffectiveSettings) -> DesiredWrite:
    """kvtier's own CephFilesystem: a replicated metadata pool (size 3; losing it would lose
    the whole file system) and one data pool with a single copy of each block (losing an
    OSD loses only cache). The file system and its pools go with the CR: the data is cache."""
    name = settings.replica1_filesystem.value
    namespace = settings.replica1_ceph_namespace.value
    pool = settings.replica1_pool_name.value
    body = {
        "apiVersion": CEPH_FILESYSTEM_API,
        "kind": "CephFilesystem",
        "metadata": {"name": name, "namespace": namespace, "labels": replica1_labels()},
        "spec": {
            "metadataPool": {"replicated": {"size": METADATA_POOL_SIZE}},
            # Rook refuses size 1 unless the risk is accepted (Ceph also needs
            # mon_allow_pool_size_one on the cluster).
            "dataPools": [
                {"name": pool, "replicated": {"size": 1, "requireSafeReplicaSize": False}}
            ],
            "preserveFilesystemOnDelete": False,
            "preservePoolsOnDelete": False,
            "metadataServer": {"activeCount": 1, "activeStandby": True},
        },
    }
    return DesiredWrite(
        "Apply",
        CEPH_FILESYSTEM_API,
        "CephFilesystem",
        name,
        namespace,
        body,
        f"CephFilesystem {namespace}/{name}: kvtier's file system with data pool {pool} of "
        f"replica size 1 (Ceph pool {replica1_ceph_pool(settings)}; an OSD loss only costs "
        "cache misses)",
    )


def replica1_storage_class(settings: EffectiveSettings) -> DesiredWrite:
    """A CephFS StorageClass whose `pool` parameter places volumes on the replica-1 pool of
    kvtier's file system. Its provisioner and parameters are immutable once created."""
    ns = settings.replica1_ceph_namespace.value
    class_name = settings.replica1_storage_class.value
    pool = replica1_ceph_pool(settings)
    parameters = {
        "clusterID": settings.replica1_cluster_id.value,
        "fsName": settings.replica1_filesystem.value,
        "pool": pool,
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
        "metadata": {"name": class_name, "labels": replica1_labels()},
        "provisioner": settings.replica1_csi_driver.value,
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
        f"StorageClass {class_name}: CephFS on pool {pool} (replica size 1) of "
        f"{settings.replica1_filesystem.value}",
    )


def replica1_writes(settings: EffectiveSettings) -> list[DesiredWrite]:
    """The file system, then its class (the policy writes the class only once Rook reports
    the file system Ready); nothing when the policy does not enable the pool."""
    if not settings.replica1_enabled.value:
        return []
    return [replica1_filesystem(settings), replica1_storage_class(settings)]


def cephfs_evictor_write(tier: TierRef, claim_name: str, evictor: EvictorSettings) -> DesiredWrite:
    """The Deployment that evicts the tier's shared CephFS claim (one for all replicas)."""
    body = cephfs_evictor_deployment(tier, claim_name, evictor)
    meta = body["metadata"]
    return DesiredWrite(
        "Apply",
        "apps/v1",
        "Deployment",
        meta["name"],
        meta["namespace"],
        body,
        f"Deployment {meta['namespace']}/{meta['name']}: kvtier evict on claim {claim_name} "
        f"(capacity {to_quantity(evictor.capacity_bytes)}, {evictor.high:g} → "
        f"{evictor.low:g}, files used in the last {evictor.protect_seconds} s kept)",
    )


# --- the tier type ------------------------------------------------------------------------------


class CephFS:
    """One claim all replicas share (ReadWriteMany), with one evictor Deployment for it."""

    name = "CephFS"
    status_name = "cephfs"
    vllm_type: str | None = "fs"
    shared = True
    evicted = True

    def available(
        self,
        spec: KVCacheTierSpec,
        settings: EffectiveSettings,
        nodes: Sequence[Mapping[str, Any]],
        eligible: Set[str],
    ) -> bool:
        """Always offered: the policy's storage class says where the claim goes."""
        return True

    def provision(self, request: TierRequest) -> Provision:
        tier, settings, sizing = request.tier, request.settings, request.sizing
        disk_spec = request.spec.disk
        requested = disk_spec.cephfs.size if disk_spec and disk_spec.cephfs else None
        size = cephfs_size_bytes(
            None if requested is None else quantity_bytes(requested), sizing.sizing
        )
        claim = cephfs_claim(
            tier, cephfs_storage_class_name(settings), size, settings.storage_retention.value
        )
        writes = [*replica1_writes(settings), claim]
        if request.evictor_image is not None and tier.uid is not None:  # owned by the tier
            block_bytes = sizing.sizing.block_bytes
            evictor = evictor_settings(settings, request.evictor_image, size, block_bytes)
            writes.append(cephfs_evictor_write(tier, claim.name, evictor))
        seed = None
        if request.replicas > 1 and sizing.shared_hash_seed:
            seed = python_hash_seed(tier.namespace, tier.name)
        return Provision(writes=tuple(writes), claim=SharedClaim(claim.name), python_hash_seed=seed)

    def policy_writes(
        self, policy: KVCachePolicySpec | None, settings: EffectiveSettings
    ) -> list[DesiredWrite]:
        """The replica-1 pool's file system and class, when the policy enables it."""
        return replica1_writes(settings)

    def probe_volume(
        self,
        request: TierRequest,
        writes: Sequence[DesiredWrite],
        disk_status: Mapping[str, Any],
    ) -> ProbeVolume | None:
        """The tier's shared claim."""
        return ProbeVolume(self.name, SharedClaim(str(disk_status.get("claimName", ""))))

    def evictor_pods(self, tier: TierRef, target: str, claim: str | None) -> str | None:
        """The claim's evictor Deployment; none before the claim is known."""
        return f"{cephfs_evictor_name(tier, claim)}-" if claim else None

    def status_text(self, sizing: SizingPlan, settings: EffectiveSettings, capacity: object) -> str:
        size = (
            quantity_bytes(str(capacity))
            if capacity
            else sizing.sizing.working_set_bytes_all_replicas
        )
        return f"CephFS {short_quantity(size)}"


CEPHFS = CephFS()
