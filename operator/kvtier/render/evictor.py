"""The evictor beside a disk tier: `kvtier evict` as a native sidecar or a small Deployment.

vLLM's fs tier never deletes a block, so every disk tier gets an evictor on its volume:

- NVMe (a volume per pod): a native sidecar in the model-server pod, i.e. an init container
  with `restartPolicy: Always`. It starts before vLLM, runs beside it, is restarted if it
  dies, and is stopped after the main containers, so the volume is never left unwatched.
- CephFS (one claim shared by every replica): one Deployment per claim. More replicas than
  one would only stand by (the evictor's lock lets one act), so it runs one, with `Recreate`.

Both run restricted-v2 / Pod Security `restricted` (non-root, no privilege escalation, no
capabilities, RuntimeDefault seccomp, read-only root file system), with resources set, the
tier's labels and, for the Deployment, an owner reference to the tier: they go with it.
The evictor must run as the user that owns vLLM's files (vLLM creates its directories 0755):
in a restricted-v2 namespace every pod gets the namespace's UID unless it sets one; a model
server that sets `runAsUser` must pass it here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvtier.names.labels import TierRef, owner_references, tier_labels, tier_selector
from kvtier.names.objects import EVICTOR_CONTAINER as CONTAINER
from kvtier.names.objects import EVICTOR_METRICS_PORT as METRICS_PORT
from kvtier.names.objects import KV_CACHE_VOLUME, hashed_name
from kvtier.render.quantities import to_quantity

COMPONENT = "app.kubernetes.io/component"
COMPONENT_VALUE = "evictor"
METRICS_PORT_NAME = "evict-metrics"
DEFAULT_MOUNT_PATH = "/mnt/kv-cache"  # where the model server mounts the tier's volume
DEPLOYMENT_NAME_MAX = 47  # ReplicaSet and pod names append up to 16 characters

MiB = 1 << 20
# Memory: the interpreter and its imports, plus what a pass holds per block file (the
# candidate arrays and the LRU order; bench/evict.py measured 96 MiB at 500,000 files,
# docs/performance.md), with room to spare: a limit hit mid-pass would kill it.
BASE_MEMORY_BYTES = 64 * MiB
MEMORY_PER_FILE_BYTES = 200
MIN_MEMORY_LIMIT_BYTES = 128 * MiB
CPU_REQUEST = "50m"  # a pass takes a core for seconds once a minute; no limit: no throttling


@dataclass(frozen=True)
class EvictorSettings:
    image: str
    capacity_bytes: int  # the tier's size: the watermarks apply to it and to the volume
    block_bytes: int  # the model's server-wide KV block: how many files fit the capacity
    high: float = 0.85
    low: float = 0.70
    protect_seconds: int = 300
    interval_seconds: int = 60
    mount_path: str = DEFAULT_MOUNT_PATH
    volume_name: str = KV_CACHE_VOLUME
    run_as_user: int | None = None  # the model server's, when it sets one

    def __post_init__(self) -> None:
        if self.capacity_bytes <= 0 or self.block_bytes <= 0:
            raise ValueError("an evictor needs the tier's capacity and block size")
        if not 0 < self.low < self.high <= 1:
            raise ValueError(f"watermarks: need 0 < low < high <= 1, got {self.low}, {self.high}")


def evictor_command(settings: EvictorSettings) -> list[str]:
    """`kvtier evict` on the tier's mount, confined to it, bounded by the tier's size."""
    return [
        "kvtier",
        "evict",
        "--dir",
        settings.mount_path,
        "--allowed-root",
        settings.mount_path,
        "--capacity",
        str(settings.capacity_bytes),
        "--high",
        f"{settings.high:g}",
        "--low",
        f"{settings.low:g}",
        "--protect-seconds",
        str(settings.protect_seconds),
        "--interval",
        str(settings.interval_seconds),
        "--metrics-port",
        str(METRICS_PORT),
        "--output",
        "json",
    ]


def evictor_resources(settings: EvictorSettings) -> dict[str, Any]:
    """Memory from the number of block files the capacity holds; the request is the limit,
    as a pass's peak is what it needs."""
    files = -(-settings.capacity_bytes // settings.block_bytes)
    memory = max(MIN_MEMORY_LIMIT_BYTES, BASE_MEMORY_BYTES + files * MEMORY_PER_FILE_BYTES)
    memory = -(-memory // MiB) * MiB
    return {
        "requests": {"cpu": CPU_REQUEST, "memory": to_quantity(memory)},
        "limits": {"memory": to_quantity(memory)},
    }


def evictor_container(settings: EvictorSettings) -> dict[str, Any]:
    """The evictor container (for a Deployment; the sidecar adds its restart policy)."""
    security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if settings.run_as_user is not None:
        security["runAsUser"] = settings.run_as_user
    return {
        "name": CONTAINER,
        "image": settings.image,
        "command": evictor_command(settings),
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": evictor_resources(settings),
        "securityContext": security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": settings.volume_name, "mountPath": settings.mount_path}],
    }


def nvme_evictor_sidecar(settings: EvictorSettings) -> dict[str, Any]:
    """The native sidecar for the model-server pod's `initContainers` (Kubernetes 1.29+,
    OpenShift 4.16+). The pod must already mount the tier's per-pod volume as
    `settings.volume_name`: the sidecar only shares it."""
    return {**evictor_container(settings), "restartPolicy": "Always"}


def cephfs_evictor_name(tier: TierRef, claim_name: str) -> str:
    return hashed_name(tier.name, "evictor", claim_name, max_length=DEPLOYMENT_NAME_MAX)


def cephfs_evictor_deployment(
    tier: TierRef, claim_name: str, settings: EvictorSettings
) -> dict[str, Any]:
    """One apps/v1 Deployment evicting the tier's shared CephFS claim, owned by the tier."""
    if tier.uid is None:
        raise ValueError("an evictor Deployment needs the KVCacheTier's uid for its owner")
    labels = {**tier_labels(tier), COMPONENT: COMPONENT_VALUE}
    selector = {**tier_selector(tier), COMPONENT: COMPONENT_VALUE}
    pod_security: dict[str, Any] = {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": cephfs_evictor_name(tier, claim_name),
            "namespace": tier.namespace,
            "labels": labels,
            "ownerReferences": owner_references(tier),
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two at once, even during a rollout
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,  # it never talks to the API
                    "enableServiceLinks": False,
                    "securityContext": pod_security,
                    "containers": [evictor_container(settings)],
                    "volumes": [
                        {
                            "name": settings.volume_name,
                            "persistentVolumeClaim": {"claimName": claim_name},
                        }
                    ],
                },
            },
        },
    }
