"""NVMe pools backed by a dynamic local provisioner's StorageClass (LVM Storage / TopoLVM, the
Local Storage Operator): every replica gets an ephemeral claim of that class.

With WaitForFirstConsumer the scheduler picks the pod's node first (checking the driver's
CSIStorageCapacity there) and the provisioner then makes the volume on that node; the claim,
and with it the volume, goes away with the pod. kvtier makes no PersistentVolume and no
StorageClass for such a pool: the class and its volumes are the provisioner's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.render.quantities import to_quantity

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


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
