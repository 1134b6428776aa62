"""The NVMe tier: a local disk per replica, from an NVMe pool of the KVCachePolicy.

A pool backed by a dynamic local provisioner's StorageClass (LVM Storage / TopoLVM, the Local
Storage Operator) gives every replica an ephemeral claim of that class. With
WaitForFirstConsumer the scheduler picks the pod's node first (checking the driver's
CSIStorageCapacity there) and the provisioner then makes the volume on that node; the claim,
and with it the volume, goes away with the pod. kvtier makes no PersistentVolume and no
StorageClass for such a pool: the class and its volumes are the provisioner's.

A mountPath pool gets a no-provisioner StorageClass per pool, one local PersistentVolume per
eligible node per tier, and the per-pod claim spec that binds each replica to the PV of its
node.

Pods never see a hostPath (OpenShift's restricted-v2 SCC forbids it): host space reaches them
only as PersistentVolumes behind a PVC. With WaitForFirstConsumer the scheduler places the pod
first and then binds the claim to a PV whose node affinity matches that node.

Reclaim policy is always Retain: the PV controller cannot delete a static local PV
(there is no provisioner to call), a Delete policy would leave it Failed. The operator deletes
a tier's PVs itself when the pool's retention is Delete (annotation kvcache.io/retention); the
files on the node are left in place either way, they are only cache.

A per-pod (ephemeral) claim goes away with its pod, which leaves the Retain PV Released: bound
to a claim that no longer exists, so no new claim can bind it. `recycle_released_volumes`
turns that into a Delete of the PV; the next apply recreates it Available, with the cached
blocks still on the node for the next replica there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.policy import KVCachePolicySpec, Retention
from kvtier.api.tier import KVCacheTierSpec
from kvtier.names.labels import (
    MANAGED_BY,
    MANAGER,
    NVME_POOL,
    RETENTION,
    TierRef,
    managed_labels,
    tier_labels,
    tier_selector,
)
from kvtier.names.objects import nvme_storage_class_name, nvme_volume_name
from kvtier.render.quantities import to_quantity
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.settings import EffectiveSettings, NVMePoolSettings, nvme_pools
from kvtier.sizing import SizingPlan
from kvtier.tiers.base import PerPodClaim, ProbeVolume, Provision, TierRequest
from kvtier.tiers.common import evictor_settings

HOSTNAME_LABEL = "kubernetes.io/hostname"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def node_hostname(node: Mapping[str, Any]) -> str:
    """The node's kubernetes.io/hostname label (what PV node affinity matches; it may differ
    from the node name on some clouds), else its name."""
    meta = _meta(node)
    labels: Mapping[str, str] = meta.get("labels") or {}
    return labels.get(HOSTNAME_LABEL) or str(meta["name"])


def eligible_nodes(
    nodes: Sequence[Mapping[str, Any]], node_selector: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """Nodes carrying every label of the pool's selector (all nodes for an empty one), minus
    nodes being deleted, sorted by name so the writes come out in a stable order."""
    chosen = []
    for node in nodes:
        meta = _meta(node)
        labels: Mapping[str, str] = meta.get("labels") or {}
        if meta.get("deletionTimestamp"):
            continue
        if all(labels.get(k) == v for k, v in node_selector.items()):
            chosen.append(node)
    return sorted(chosen, key=lambda n: str(_meta(n)["name"]))


def recycle_released_volumes(volumes: Sequence[Mapping[str, Any]]) -> list[DesiredWrite]:
    """Deletes of kvtier's NVMe PVs in phase Released (see the module docstring). Deleting a
    Retain PV object leaves the files on the node untouched."""
    writes = []
    for pv in volumes:
        meta = _meta(pv)
        labels: Mapping[str, str] = meta.get("labels") or {}
        phase = (pv.get("status") or {}).get("phase")
        if NVME_POOL in labels and labels.get(MANAGED_BY) == MANAGER and phase == "Released":
            name = str(meta["name"])
            writes.append(
                DesiredWrite(
                    "Delete",
                    "v1",
                    "PersistentVolume",
                    name,
                    None,
                    {},
                    f"PersistentVolume {name}: Released by a finished pod; recreate it Available",
                )
            )
    return writes


def nvme_capacity_bytes(requested: int | None, pool: NVMePoolSettings) -> int:
    """Per-replica capacity: the tier's spec.disk.nvme.size, else the pool's capacityPerNode.
    A request above capacityPerNode is refused: the pool says what a node may give."""
    if requested is None:
        return pool.capacity_per_node_bytes
    if requested > pool.capacity_per_node_bytes:
        raise RenderError(
            "NVMeSizeExceedsPool",
            f"spec.disk.nvme.size {to_quantity(requested)} exceeds the capacity per node of "
            f"pool {pool.name}, {to_quantity(pool.capacity_per_node_bytes)}",
        )
    return requested


def nvme_storage_class(pool: NVMePoolSettings) -> DesiredWrite:
    """The pool's no-provisioner class, shared by every tier on the pool (so it carries no
    tier labels and no owner; the operator removes it when no tier uses the pool)."""
    name = nvme_storage_class_name(pool.name)
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "labels": {**managed_labels(), NVME_POOL: pool.name}},
        "provisioner": NO_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    }
    return DesiredWrite(
        "Apply",
        "storage.k8s.io/v1",
        "StorageClass",
        name,
        None,
        body,
        f"StorageClass {name}: no provisioner, WaitForFirstConsumer, for NVMe pool {pool.name}",
    )


def nvme_volume(
    tier: TierRef, pool: NVMePoolSettings, node: Mapping[str, Any], capacity_bytes: int
) -> DesiredWrite:
    """One tier's local PersistentVolume on one node (on the directory prepared there)."""
    node_name = str(_meta(node)["name"])
    name = nvme_volume_name(tier.namespace, tier.name, node_name)
    path = pool.mount_path
    assert path is not None  # admission: a pool without storageClassName has a mountPath
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "labels": {**tier_labels(tier), NVME_POOL: pool.name},
            "annotations": {RETENTION: pool.retention.value},
        },
        "spec": {
            "capacity": {"storage": to_quantity(capacity_bytes)},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": nvme_storage_class_name(pool.name),
            "local": {"path": path},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": HOSTNAME_LABEL,
                                    "operator": "In",
                                    "values": [node_hostname(node)],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }
    return DesiredWrite(
        "Apply",
        "v1",
        "PersistentVolume",
        name,
        None,
        body,
        f"PersistentVolume {name}: {to_quantity(capacity_bytes)} NVMe (local PV) on {node_name} "
        f"at {path}",
    )


def nvme_volumes(
    tier: TierRef,
    pool: NVMePoolSettings,
    nodes: Sequence[Mapping[str, Any]],
    capacity_bytes: int,
) -> list[DesiredWrite]:
    """One PV per eligible node, so a replica finds one wherever it is scheduled."""
    eligible = eligible_nodes(nodes, pool.node_selector)
    if not eligible:
        selector = ", ".join(f"{k}={v}" for k, v in sorted(pool.node_selector.items()))
        raise RenderError(
            "NoEligibleNodes",
            f"no node matches the node selector of NVMe pool {pool.name} ({selector or 'any'})",
        )
    return [nvme_volume(tier, pool, node, capacity_bytes) for node in eligible]


def nvme_claim_spec(tier: TierRef, pool: NVMePoolSettings, capacity_bytes: int) -> dict[str, Any]:
    """The per-pod PVC spec: the pool's class, and a selector that matches only this tier's
    PVs (on that pool), so a replica binds the PV of the node it lands on. A storageClassName
    pool's claims name that class and no selector: its provisioner makes the volume."""
    if pool.storage_class_name is not None:
        return class_claim_spec(pool.storage_class_name, capacity_bytes)
    return {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "storageClassName": nvme_storage_class_name(pool.name),
        "resources": {"requests": {"storage": to_quantity(capacity_bytes)}},
        "selector": {"matchLabels": {**tier_selector(tier), NVME_POOL: pool.name}},
    }


# --- a storageClassName pool -------------------------------------------------------------------


def class_claim_spec(storage_class_name: str, capacity_bytes: int) -> dict[str, Any]:
    """The per-pod claim spec: no selector, the provisioner makes a volume to match."""
    return {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "storageClassName": storage_class_name,
        "resources": {"requests": {"storage": to_quantity(capacity_bytes)}},
    }


def binding_mode(storage_class: Mapping[str, Any]) -> str:
    """The class's volumeBindingMode; the API server defaults an unset one to Immediate."""
    return str(storage_class.get("volumeBindingMode") or "Immediate")


def class_pool_note(pool: str, class_name: str) -> str:
    """What status.plan says about a StorageClass pool's volumes."""
    return (
        f"NVMe pool {pool}: each replica gets an ephemeral claim of StorageClass {class_name}; "
        "its provisioner makes the volume and deletes it with the pod (kvtier makes no "
        "PersistentVolume)"
    )


def binding_warning(storage_class: Mapping[str, Any]) -> str | None:
    """A warning for a class that does not wait for the pod: Immediate binding places the
    volume first, maybe on a node without the model server's GPUs, and the pod must follow."""
    mode = binding_mode(storage_class)
    if mode == WAIT_FOR_FIRST_CONSUMER:
        return None
    name = (storage_class.get("metadata") or {}).get("name")
    return (
        f"StorageClass {name} has volumeBindingMode {mode}: a volume may be made on a node the "
        f"model server cannot run on ({WAIT_FOR_FIRST_CONSUMER} avoids that)"
    )


# --- the tier type ------------------------------------------------------------------------------


def _retention_note(pool: NVMePoolSettings) -> str:
    return f"NVMe PVs have reclaim policy Retain; retention {pool.retention.value}: " + (
        "the operator deletes them with the tier"
        if pool.retention is Retention.DELETE
        else "they stay after the tier is deleted"
    )


class NVMe:
    """A local disk per replica (a per-pod claim), with its evictor as a native sidecar."""

    name = "NVMe"
    status_name = "nvme"
    vllm_type: str | None = "fs"
    shared = False
    evicted = True

    def available(
        self,
        spec: KVCacheTierSpec,
        settings: EffectiveSettings,
        nodes: Sequence[Mapping[str, Any]],
        eligible: Set[str],
    ) -> bool:
        """The tier's pool has a node the model server can land on."""
        pool = settings.nvme_pool
        if pool is None:
            return False
        in_pool = (str(_meta(node)["name"]) for node in eligible_nodes(nodes, pool.node_selector))
        return any(name in eligible for name in in_pool)

    def provision(self, request: TierRequest) -> Provision:
        settings, disk_spec = request.settings, request.spec.disk
        pool = settings.nvme_pool
        if pool is None:
            named = disk_spec.nvme.pool if disk_spec and disk_spec.nvme else None
            raise RenderError(
                "NVMePoolNotFound",
                f"the KVCachePolicy defines no NVMe pool {named}"
                if named
                else "an NVMe tier needs spec.disk.nvme.pool",
            )
        requested = disk_spec.nvme.size if disk_spec and disk_spec.nvme else None
        capacity = nvme_capacity_bytes(
            None if requested is None else quantity_bytes(requested), pool
        )
        claim = PerPodClaim(spec=nvme_claim_spec(request.tier, pool, capacity))
        sidecar = None
        if request.evictor_image is not None:
            block_bytes = request.sizing.sizing.block_bytes
            sidecar = evictor_settings(settings, request.evictor_image, capacity, block_bytes)
        if pool.storage_class_name is not None:
            note = class_pool_note(pool.name, pool.storage_class_name)
            return Provision(notes=(note,), claim=claim, sidecar=sidecar)
        volumes = nvme_volumes(request.tier, pool, request.nodes, capacity)
        notes = [_retention_note(pool)]
        if request.replicas > len(volumes):
            notes.append(
                f"{request.replicas} replicas but {len(volumes)} eligible node(s): each node "
                "holds one PV per tier, so replicas beyond that stay Pending"
            )
        return Provision(
            writes=(nvme_storage_class(pool), *volumes),
            notes=tuple(notes),
            claim=claim,
            sidecar=sidecar,
        )

    def policy_writes(
        self, policy: KVCachePolicySpec | None, settings: EffectiveSettings
    ) -> list[DesiredWrite]:
        """One no-provisioner StorageClass per mountPath pool (a storageClassName pool's class
        is its provisioner's)."""
        local_pools = (p for p in nvme_pools(policy) if p.storage_class_name is None)
        return [nvme_storage_class(p) for p in local_pools]

    def probe_volume(
        self,
        request: TierRequest,
        writes: Sequence[DesiredWrite],
        disk_status: Mapping[str, Any],
    ) -> ProbeVolume | None:
        """A per-pod claim like the model server's, on a node of the pool."""
        pool = request.settings.nvme_pool
        if pool is None:
            return None
        pv = next((w for w in writes if w.kind == "PersistentVolume"), None)
        capacity = quantity_bytes(  # a StorageClass pool has no PV, only its claim size
            pv.body["spec"]["capacity"]["storage"] if pv else disk_status["capacityQuantity"]
        )
        claim = PerPodClaim(nvme_claim_spec(request.tier, pool, capacity))
        return ProbeVolume(self.name, claim, pool.node_selector)

    def evictor_pods(self, tier: TierRef, target: str, claim: str | None) -> str | None:
        """The model server's own pods: each runs the evictor of its volume."""
        return f"{target}-"

    def status_text(self, sizing: SizingPlan, settings: EffectiveSettings, capacity: object) -> str:
        pool = settings.nvme_pool
        return f"NVMe ({pool.name})" if pool is not None else self.name


NVME = NVMe()
