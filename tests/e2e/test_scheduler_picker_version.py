"""The endpoint picker's version from an LLMInferenceServiceConfig the LLMInferenceService
names in spec.baseRefs, on the local control plane with KServe's CRDs: at 0.8.0 kvtier sizes
the CPU scorer itself; the config changed to 0.9.0 (where KServe strips the scorer's
parameters) re-reconciles the tier to SchedulerParametersDropped; the config deleted leaves
the version unknown (SchedulerVersionUnknown naming it)."""

from __future__ import annotations

import json
from typing import Any, cast

from kubernetes import client

from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.kube_helpers import (
    apply_policy,
    condition,
    create_tier,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY
from tests.e2e.test_real_contracts import APPLIED, argo_sync, live
from tests.e2e.test_scheduler_configmap import TIER, _server

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1alpha2", "llminferenceserviceconfigs"
BASE = "epp-version"
CAPACITY = 31250  # the user's own value, before kvtier sizes it


def _user() -> dict[str, Any]:
    server = _server()
    server["spec"]["baseRefs"] = [{"name": BASE}]
    scheduler = server["spec"]["router"]["scheduler"]
    del scheduler["annotations"]  # the version comes from the baseRef'd config
    scheduler["config"] = {
        "inline": {
            "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
            "kind": "EndpointPickerConfig",
            "plugins": [
                {"type": "prefix-cache-scorer", "name": "gpu-prefix-cache-scorer"},
                {
                    "type": "prefix-cache-scorer",
                    "name": "cpu-prefix-cache-scorer",
                    "parameters": {"autoTune": True, "lruCapacityPerServer": CAPACITY},
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


def _config(version: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LLMInferenceServiceConfig",
        "metadata": {"name": BASE},
        "spec": {"router": {"scheduler": {"annotations": {"app.kubernetes.io/version": version}}}},
    }


def _scorer(obj: dict[str, Any]) -> dict[str, Any]:
    plugins = obj["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    found = next(p for p in plugins if p["name"] == "cpu-prefix-cache-scorer")
    return dict(found["parameters"])


def test_a_base_refd_configs_version_decides_and_its_change_re_reconciles(
    cluster: LocalCluster, admin_api: client.ApiClient, operator: OperatorProcess
) -> None:
    apply_policy(admin_api, POLICY)
    ns = new_namespace(admin_api, "picker-version")
    configs = client.CustomObjectsApi(admin_api)
    configs.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _config("0.8.0"))
    argo_sync(admin_api, ns, _user())
    user = live(admin_api, ns, _user())
    create_tier(admin_api, ns, "qwen", TIER)
    tier = wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=120)
    assert tier["status"]["plan"]["scheduler"]["plugin"] == "cpu-prefix-cache-scorer"
    blocks = tier["status"]["plan"]["scheduler"]["lruCapacityPerServer"]
    assert blocks == tier["status"]["plan"]["roles"][0]["cpuTierBlocks"]
    assert _scorer(live(admin_api, ns, user)) == {
        "autoTune": False,
        "lruCapacityPerServer": blocks,
    }

    # The platform team moves the config to a 0.9 picker: only the config's watch event can
    # wake the tier (the LLMInferenceService does not change).
    current = cast(
        dict[str, Any], configs.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, BASE)
    )
    current["spec"]["router"]["scheduler"]["annotations"]["app.kubernetes.io/version"] = "0.9.0"
    configs.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, BASE, current)
    wait_condition(
        admin_api, ns, "qwen", "SchedulerSynced", "False", "SchedulerParametersDropped", 60
    )
    # kvtier no longer keeps the scorer in step: the user's own values go back, and then
    # kvtier's record of them.
    back = eventually(
        lambda: (
            (t := live(admin_api, ns, user))
            and "scheduler" not in json.loads(t["metadata"]["annotations"][APPLIED])
            and t
        ),
        what="the user's scorer values back and kvtier's record of them gone",
    )
    assert _scorer(back) == {"autoTune": True, "lruCapacityPerServer": CAPACITY}

    configs.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, BASE)
    tier = wait_condition(
        admin_api, ns, "qwen", "SchedulerSynced", "False", "SchedulerVersionUnknown", 60
    )
    synced = condition(tier, "SchedulerSynced") or {}
    assert f"LLMInferenceServiceConfig {BASE}" in synced["message"], synced
    # kvtier syncs no router any more: the status says so (no plan.scheduler left behind by a
    # merge patch that only left it out), and no write follows on the periodic passes.
    assert "scheduler" not in tier["status"]["plan"], tier["status"]["plan"]
    assert sum(audit.idle_writes(cluster.audit_log, operator, namespace=ns).values()) == 0
