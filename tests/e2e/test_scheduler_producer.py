"""An endpoint picker of 0.9.0 or later (KServe v0.20's scheduler preset, here in the
LLMInferenceService's namespace) with its config inline: kvtier keeps the
approx-prefix-cache-producer the CPU scorer names in step on the local control plane with
KServe's CRDs, Argo CD re-applies (deploy/argocd/application.yaml's ignoreDifferences)
cause no operator write, and deleting the tier gives the user's router config back exactly."""

from __future__ import annotations

import copy
import time
from typing import Any

from kubernetes import client

from kvtier.render.picker_version import PRESET
from kvtier.render.scheduler import VERSION_ANNOTATION
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY
from tests.e2e.test_real_contracts import APPLIED, argo_sync, live
from tests.e2e.test_scheduler_configmap import TIER, _server

ROUNDS = 10
PRESET_CONFIG = {
    "apiVersion": "serving.kserve.io/v1alpha2",
    "kind": "LLMInferenceServiceConfig",
    "metadata": {"name": PRESET},
    "spec": {"router": {"scheduler": {"annotations": {VERSION_ANNOTATION: "0.9.0"}}}},
}


def _user() -> dict[str, Any]:
    server = _server()
    scheduler = server["spec"]["router"]["scheduler"]
    del scheduler["annotations"]  # the scheduler preset's: picker 0.9.0
    scheduler["config"] = {
        "inline": {
            "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
            "kind": "EndpointPickerConfig",
            "plugins": [
                {"type": "approx-prefix-cache-producer", "name": "gpuPrefixProducer"},
                {
                    "type": "approx-prefix-cache-producer",
                    "name": "cpuPrefixProducer",
                    "parameters": {"blockSizeTokens": 64, "lruCapacityPerServer": 31250},
                },
                {
                    "type": "prefix-cache-scorer",
                    "name": "gpu-prefix-cache-scorer",
                    "parameters": {"prefixMatchInfoProducerName": "gpuPrefixProducer"},
                },
                {
                    "type": "prefix-cache-scorer",
                    "name": "cpu-prefix-cache-scorer",
                    "parameters": {"prefixMatchInfoProducerName": "cpuPrefixProducer"},
                },
            ],
            "schedulingProfiles": [
                {
                    "name": "default",
                    "plugins": [
                        {"pluginRef": "gpu-prefix-cache-scorer", "weight": 1},
                        {"pluginRef": "cpu-prefix-cache-scorer", "weight": 1},
                    ],
                }
            ],
        }
    }
    return server


def _producer(obj: dict[str, Any]) -> dict[str, Any]:
    plugins = obj["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    found: dict[str, Any] = next(p for p in plugins if p.get("name") == "cpuPrefixProducer")
    return dict(found["parameters"])


def test_a_09_pickers_producer_in_step_through_argo_and_back(
    cluster: LocalCluster, admin_api: client.ApiClient, operator: OperatorProcess
) -> None:
    apply_policy(admin_api, POLICY)
    ns = new_namespace(admin_api, "producer")
    # KServe's shipped scheduler preset, found in the object's namespace before KServe's own.
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "serving.kserve.io", "v1alpha2", ns, "llminferenceserviceconfigs", PRESET_CONFIG
    )
    argo_sync(admin_api, ns, _user())
    user = live(admin_api, ns, _user())
    create_tier(admin_api, ns, "qwen", TIER)
    tier = wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=120)
    (decode,) = tier["status"]["plan"]["roles"]
    blocks = decode["cpuBytesToUse"] // (64 * tier["status"]["sizing"]["bytesPerToken"])
    assert tier["status"]["plan"]["scheduler"]["plugin"] == "cpuPrefixProducer"
    current = live(admin_api, ns, user)
    assert _producer(current) == {
        "blockSizeTokens": 64,
        "lruCapacityPerServer": blocks,
        "autoTune": False,
    }
    # Only the CPU tier's producer changed.
    changed = [
        a["name"]
        for a, b in zip(
            current["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"],
            user["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"],
            strict=True,
        )
        if a != b
    ]
    assert changed == ["cpuPrefixProducer"]
    time.sleep(2)
    start = time.time()
    for _ in range(ROUNDS):
        argo_sync(admin_api, ns, _user())
    operator.wait_resyncs()  # what the syncs left is looked at again, twice
    names: list[str] = []
    writes = audit.writes(cluster.audit_log, since=start, names=names, namespace=ns)
    assert sum(writes.values()) == 0, names
    assert _producer(live(admin_api, ns, user))["lruCapacityPerServer"] == blocks
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "qwen"
    )
    restored = eventually(
        lambda: (
            (t := live(admin_api, ns, user))
            and APPLIED not in (t["metadata"].get("annotations") or {})
            and t
        ),
        what="the spec back",
    )
    assert restored["spec"]["router"] == user["spec"]["router"]
    argo_sync(admin_api, ns, copy.deepcopy(_user()))
    assert live(admin_api, ns, user)["spec"]["router"] == user["spec"]["router"]
