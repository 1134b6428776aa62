"""The evictor's pods (render/evictor.py) on the real kube-apiserver and controllers, in a
namespace that enforces Pod Security `restricted`: the NVMe native sidecar is admitted in a
model server's pod (and kept as a sidecar), the CephFS Deployment's ReplicaSet creates its
pod, and the Deployment goes with its KVCacheTier (garbage collection)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from kvtier.names.labels import TierRef
from kvtier.names.objects import EVICTOR_CONTAINER as CONTAINER
from kvtier.names.objects import KV_CACHE_VOLUME
from kvtier.render.evictor import (
    EvictorSettings,
    cephfs_evictor_deployment,
    nvme_evictor_sidecar,
)
from tests.e2e.kube_helpers import create_tier, eventually, get_tier, new_namespace
from tests.e2e.test_pod_security import REFUSED, dry_run_pod

SETTINGS = EvictorSettings(
    image="quay.io/kvtier/kvtier:0.1.0", capacity_bytes=1 << 40, block_bytes=5 << 20
)


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, crds: None) -> str:
    return new_namespace(admin_api, "evict")


def model_server_pod(sidecar: dict[str, Any]) -> dict[str, Any]:
    """A restricted model-server pod with its per-pod NVMe claim and the evictor beside it."""
    claim = {
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "kvtier-nvme-local-nvme",
            "resources": {"requests": {"storage": "1Ti"}},
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "server"},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": [sidecar],
            "containers": [
                {
                    "name": "main",
                    "image": "vllm/vllm-openai:v0.24.0",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": KV_CACHE_VOLUME, "mountPath": "/mnt/kv-cache"}],
                }
            ],
            "volumes": [{"name": KV_CACHE_VOLUME, "ephemeral": {"volumeClaimTemplate": claim}}],
        },
    }


def test_the_nvme_sidecar_is_admitted_and_stays_a_sidecar(
    admin_api: client.ApiClient, ns: str
) -> None:
    pod = model_server_pod(nvme_evictor_sidecar(SETTINGS))
    assert dry_run_pod(admin_api, ns, pod) is None
    created = client.CoreV1Api(admin_api).create_namespaced_pod(ns, pod, dry_run="All")  # type: ignore[arg-type]
    (init,) = created.spec.init_containers or []
    assert (init.name, init.restart_policy) == (CONTAINER, "Always")
    # The control: the same sidecar allowed to escalate privileges is refused there.
    loose = copy.deepcopy(pod)
    del loose["spec"]["initContainers"][0]["securityContext"]["allowPrivilegeEscalation"]
    refusal = dry_run_pod(admin_api, ns, loose)
    assert refusal is not None and REFUSED in refusal


def test_the_cephfs_deployment_runs_and_goes_with_its_tier(
    admin_api: client.ApiClient, ns: str
) -> None:
    spec = {
        "mode": "Plan",
        "targetRef": {"kind": "InferenceService", "name": "m"},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
    }
    create_tier(admin_api, ns, "shared", spec)
    uid = get_tier(admin_api, ns, "shared")["metadata"]["uid"]
    body = cephfs_evictor_deployment(TierRef(ns, "shared", uid), "kvtier-shared-cephfs", SETTINGS)
    apps, core = client.AppsV1Api(admin_api), client.CoreV1Api(admin_api)
    apps.create_namespaced_deployment(ns, body)  # type: ignore[arg-type]
    name = body["metadata"]["name"]
    selector = ",".join(f"{k}={v}" for k, v in body["spec"]["selector"]["matchLabels"].items())

    def pod_created() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        return pods or None

    # The ReplicaSet controller's pod passes the namespace's PodSecurity admission.
    (pod,) = eventually(pod_created, timeout=60, what="the evictor's pod")
    assert pod.spec.containers[0].name == CONTAINER
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "shared"
    )

    def deployment_gone() -> bool | None:
        names = [d.metadata.name for d in apps.list_namespaced_deployment(ns).items]
        return True if name not in names else None

    eventually(deployment_gone, timeout=60, what="the Deployment deleted with its tier")
