"""Local NVMe tier of a mountPath pool: a no-provisioner StorageClass per pool, one local
PersistentVolume per eligible node per tier, and the per-pod claim spec that binds each
replica to the PV of its node (a storageClassName pool: nvme_class.py).

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

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.render.labels import (
    MANAGED_BY,
    MANAGER,
    NVME_POOL,
    RETENTION,
    TierRef,
    managed_labels,
    tier_labels,
    tier_selector,
)
from kvtier.render.naming import nvme_storage_class_name, nvme_volume_name
from kvtier.render.nvme_class import class_claim_spec
from kvtier.render.quantities import to_quantity
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.settings import NVMePoolSettings

HOSTNAME_LABEL = "kubernetes.io/hostname"
NO_PROVISIONER = "kubernetes.io/no-provisioner"


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
