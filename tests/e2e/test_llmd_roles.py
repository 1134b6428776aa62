"""llm-d as a whole on KServe's own CRDs (v0.20): a prefill/decode LLMInferenceService (its
prefill data-parallel over a leader and a worker pod) and a multi-node (data-parallel
LeaderWorkerSet) one come out with every vLLM pod template sized and patched, KServe's own
controller turns them into workloads that carry each role's figures, the router's CPU-tier
scorer holds kvtier's block count, Argo-CD-like re-applies cause no write, and deleting the
tier gives everything back.

Argo CD is played as in test_real_contracts.py: a forced apply by its manager with the live
values of the fields deploy/argocd/application.yaml ignores carried into the manifest.
"""

from __future__ import annotations

import copy
import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kvtier.kube.rest import Kube
from kvtier.render.quantities import quantity_to_bytes
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_kserve_offload import oracle, render
from tests.e2e.test_operator_apply import POLICY
from tests.e2e.test_real_contracts import APPLIED, _path, argo_sync, live

__all__ = ["oracle"]  # the fixture that builds KServe's controller (test_kserve_offload.py)

ROUNDS = 20
V1ALPHA1 = "serving.kserve.io/v1alpha1"
CPU_SCORER = "cpu-prefix-cache-scorer"
USER_MEMORY = 256 << 30


def _pod(gpus: int) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "main",
                "image": "ghcr.io/llm-d/llm-d-cuda:v0.8.0",
                "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}],
                "resources": {
                    "limits": {"nvidia.com/gpu": str(gpus), "memory": "256Gi"},
                    "requests": {"nvidia.com/gpu": str(gpus), "memory": "256Gi"},
                },
                "volumeMounts": [{"name": "chat", "mountPath": "/opt/templates"}],
            }
        ],
        "volumes": [{"name": "chat", "configMap": {"name": "chat-templates"}}],
    }


def _epp_config() -> dict[str, Any]:
    """llm-d's tiered-prefix-cache layout in KServe's P/D profiles."""
    refs = [
        {"pluginRef": "queue-scorer", "weight": 2},
        {"pluginRef": "gpu-prefix-cache-scorer", "weight": 1},
        {"pluginRef": CPU_SCORER, "weight": 1},
        {"pluginRef": "max-score-picker"},
    ]
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "prefix-cache-scorer", "name": "gpu-prefix-cache-scorer"},
            {
                "type": "prefix-cache-scorer",
                "name": CPU_SCORER,
                "parameters": {"autoTune": False, "lruCapacityPerServer": 41000},
            },
            {"type": "max-score-picker"},
        ],
        "schedulingProfiles": [
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, *refs]},
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, *refs]},
        ],
    }


def prefill_decode() -> dict[str, Any]:
    """Decode TP 4 × 2 replicas on spec.template; prefill 2 replicas of 4 data-parallel ranks,
    2 per pod, on spec.prefill.template (the leader) and spec.prefill.worker."""
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen-pd"},
        "spec": {
            "model": {"uri": "hf://Qwen/Qwen3-32B", "name": "Qwen/Qwen3-32B"},
            "replicas": 2,
            "parallelism": {"tensor": 4},
            "template": _pod(4),
            "prefill": {
                "replicas": 2,
                "parallelism": {"tensor": 1, "data": 4, "dataLocal": 2},
                "template": _pod(2),
                "worker": _pod(2),
            },
            "router": {
                "route": {},
                "gateway": {},
                # A 0.8 picker, whose scorer takes the capacity (KServe drops it from 0.9.0).
                "scheduler": {
                    "annotations": {"app.kubernetes.io/version": "0.8.0"},
                    "config": {"inline": _epp_config()},
                },
            },
        },
    }


def multi_node() -> dict[str, Any]:
    """KServe's worker-data-parallel shape: 16 data-parallel ranks, 8 per pod, written as
    v1alpha1 (so kvtier passes the flag in VLLM_ADDITIONAL_ARGS of leader and worker)."""
    return {
        "apiVersion": V1ALPHA1,
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen-dp"},
        "spec": {
            "model": {"uri": "hf://Qwen/Qwen3-32B", "name": "Qwen/Qwen3-32B"},
            "replicas": 1,
            "parallelism": {"tensor": 1, "data": 16, "dataLocal": 8},
            "template": _pod(8),
            "worker": _pod(8),
            "router": {"route": {}, "gateway": {}, "scheduler": {}},
        },
    }


def _at(obj: dict[str, Any], template: str) -> dict[str, Any]:
    node: dict[str, Any] = obj["spec"]
    for key in template.removeprefix("spec.").split("."):
        node = node[key]
    return node


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == "main")
    return found


def _cpu_scorer(obj: dict[str, Any]) -> dict[str, Any]:
    plugins = obj["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    found: dict[str, Any] = next(p for p in plugins if p.get("name") == CPU_SCORER)
    return found


def _tier(target: str) -> dict[str, Any]:
    return {
        "mode": "Apply",
        "targetRef": {"kind": "LLMInferenceService", "name": target},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
        "disk": {"type": "None"},
    }


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "llmd")


@pytest.fixture(scope="module")
def applied(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str
) -> dict[str, dict[str, Any]]:
    """Both targets synced by Argo CD, then one tier each, Applied. The user's objects as the
    API stored them before kvtier, by target name."""
    users: dict[str, dict[str, Any]] = {}
    for user in (prefill_decode(), multi_node()):
        argo_sync(admin_api, ns, user)
        users[user["metadata"]["name"]] = live(admin_api, ns, user)
        name = user["metadata"]["name"]
        create_tier(admin_api, ns, name, _tier(name))
    for name in users:
        wait_condition(admin_api, ns, name, "Applied", "True", timeout=120)
    wait_condition(admin_api, ns, "qwen-pd", "SchedulerSynced", "True", timeout=60)
    return users


def _check_roles(api: client.ApiClient, ns: str, name: str, user: dict[str, Any]) -> None:
    """Every template of every role holds the role's memory and /dev/shm, beside the user's
    own fields."""
    roles = get_tier(api, ns, name)["status"]["plan"]["roles"]
    current = live(api, ns, user)
    patched = 0
    for role in roles:
        for template in role["templates"]:
            pod, main = _at(current, template), _main(_at(current, template))
            requests = main["resources"]["requests"]
            assert quantity_to_bytes(requests["memory"]) == USER_MEMORY + role["podMemoryBytes"]
            assert (
                requests["nvidia.com/gpu"]
                == _main(_at(user, template))["resources"]["requests"]["nvidia.com/gpu"]
            )
            assert {"name": "chat", "mountPath": "/opt/templates"} in main["volumeMounts"]
            assert {"name": "chat", "configMap": {"name": "chat-templates"}} in pod["volumes"]
            if role.get("shmBytes") is not None:
                dshm = next(v for v in pod["volumes"] if v["name"] == "kvtier-dshm")
                assert quantity_to_bytes(dshm["emptyDir"]["sizeLimit"]) == role["shmBytes"]
            patched += 1
    assert patched == sum(len(r["templates"]) for r in roles)


def test_prefill_decode_every_role_is_sized_and_patched(
    admin_api: client.ApiClient, ns: str, applied: dict[str, dict[str, Any]]
) -> None:
    user = applied["qwen-pd"]
    plan = get_tier(admin_api, ns, "qwen-pd")["status"]["plan"]
    decode, prefill = plan["roles"]
    assert (decode["role"], decode["templates"], decode["tensor"]) == (
        "decode",
        ["spec.template"],
        4,
    )
    assert (prefill["role"], prefill["templates"], prefill["tensor"]) == (
        "prefill",
        ["spec.prefill.template", "spec.prefill.worker"],
        1,
    )
    # Each pod holds the tiers of its two engines.
    assert (prefill["podsPerReplica"], prefill["enginesPerPod"]) == (2, 2)
    assert prefill["cpuBytesPerPod"] == 2 * prefill["cpuBytesToUse"]
    _check_roles(admin_api, ns, "qwen-pd", user)
    current = live(admin_api, ns, user)
    assert quantity_to_bytes(current["spec"]["kvCacheOffloading"]["cpu"]) == decode["cpuBytesToUse"]
    prefill_cpu = current["spec"]["prefill"]["kvCacheOffloading"]["cpu"]
    assert quantity_to_bytes(prefill_cpu) == prefill["cpuBytesToUse"]


def test_the_routers_cpu_scorer_holds_kvtiers_block_count(
    admin_api: client.ApiClient, ns: str, applied: dict[str, dict[str, Any]]
) -> None:
    status = get_tier(admin_api, ns, "qwen-pd")["status"]
    plan = status["plan"]
    scorer = _cpu_scorer(live(admin_api, ns, applied["qwen-pd"]))
    # One endpoint per replica (a prefill leader fronts its group's 4 engines): the smaller
    # role's tier behind one endpoint, in 16-token blocks.
    block = 16 * status["sizing"]["bytesPerToken"]
    decode, prefill = plan["roles"]
    blocks = min(decode["cpuBytesToUse"], 4 * prefill["cpuBytesToUse"]) // block
    assert decode["cpuTierBlocks"] == decode["cpuBytesToUse"] // block
    assert scorer["parameters"] == {"autoTune": False, "lruCapacityPerServer": blocks}
    assert plan["scheduler"]["lruCapacityPerServer"] == blocks
    assert plan["scheduler"]["roles"] == ["prefill", "decode"]
    user_plugins = applied["qwen-pd"]["spec"]["router"]["scheduler"]["config"]["inline"]
    current = live(admin_api, ns, applied["qwen-pd"])["spec"]["router"]["scheduler"]["config"]
    assert [p for p in current["inline"]["plugins"] if p.get("name") != CPU_SCORER] == [
        p for p in user_plugins["plugins"] if p.get("name") != CPU_SCORER
    ]


def test_multi_node_leader_and_worker_hold_every_local_engines_tier(
    admin_api: client.ApiClient, ns: str, applied: dict[str, dict[str, Any]]
) -> None:
    user = applied["qwen-dp"]
    (role,) = get_tier(admin_api, ns, "qwen-dp")["status"]["plan"]["roles"]
    assert role["templates"] == ["spec.template", "spec.worker"]
    assert (role["podsPerReplica"], role["enginesPerPod"]) == (2, 8)
    assert role["cpuBytesPerPod"] == 8 * role["cpuBytesToUse"]
    _check_roles(admin_api, ns, "qwen-dp", user)
    current = live(admin_api, ns, user)
    assert "kvCacheOffloading" not in current["spec"]  # v1alpha1: the flag in the env
    for template in ("template", "worker"):
        env = {e["name"]: e.get("value") for e in _main(current["spec"][template])["env"]}
        assert env["VLLM_LOGGING_LEVEL"] == "INFO"
        assert f'"cpu_bytes_to_use":{role["cpuBytesToUse"]}' in env["VLLM_ADDITIONAL_ARGS"]


# KServe role of each workload the controller makes: (kind, name suffix, LWS role) -> template.
WORKLOADS = {
    "qwen-pd": {
        ("Deployment", "kserve", "pod"): "spec.template",
        ("LeaderWorkerSet", "kserve-mn-prefill", "leader"): "spec.prefill.template",
        ("LeaderWorkerSet", "kserve-mn-prefill", "worker"): "spec.prefill.worker",
    },
    "qwen-dp": {
        ("LeaderWorkerSet", "kserve-mn", "leader"): "spec.template",
        ("LeaderWorkerSet", "kserve-mn", "worker"): "spec.worker",
    },
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_kserve_deploys_every_role_with_kvtiers_figures(
    oracle: Path, admin_api: client.ApiClient, ns: str, applied: dict[str, Any], name: str
) -> None:
    """KServe's own controller (v0.20.0, hack/oracles/kserve) turns the object kvtier patched
    into its workloads: every pod of every role gets the role's memory and /dev/shm, and the
    vLLM it starts gets the role's cpu_bytes_to_use."""
    stored = live(admin_api, ns, applied[name])
    obj = {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": name, "namespace": "llm"},
        "spec": live(admin_api, ns, {**stored, "apiVersion": "serving.kserve.io/v1alpha2"})["spec"],
    }
    roles = {
        t: r
        for r in get_tier(admin_api, ns, name)["status"]["plan"]["roles"]
        for t in r["templates"]
    }
    # LeaderWorkerSet puts the leader's address in every pod of a group; the oracle runs the
    # command outside one, so it gets the value here (else getent lists every host).
    for template, role in roles.items():
        if role["podsPerReplica"] > 1:
            _main(_at(obj, template)).setdefault("env", []).append(
                {"name": "LWS_LEADER_ADDRESS", "value": "localhost"}
            )
    out = render(oracle, obj)
    seen = set()
    for workload in out["workloads"]:
        key = next(
            (
                k
                for k in WORKLOADS[name]
                if k[0] == workload["kind"]
                and workload["name"] == f"{name}-{k[1]}"
                and k[2] == workload["role"]
            ),
            None,
        )
        if key is None:
            continue
        role = roles[WORKLOADS[name][key]]
        main = next(c for c in workload["containers"] if c["name"] == "main")
        memory = main["resources"]["requests"]["memory"]
        assert quantity_to_bytes(memory) == USER_MEMORY + role["podMemoryBytes"], key
        if role.get("shmBytes") is not None:
            [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == "/dev/shm"]
            [volume] = [v for v in workload["volumes"] if v["name"] == mount["name"]]
            assert quantity_to_bytes(volume["emptyDir"]["sizeLimit"]) == role["shmBytes"]
        assert main.get("vllmArgv"), (key, main.get("vllmError"))
        extra = main["kvTransferConfig"]["kv_connector_extra_config"]
        assert extra["cpu_bytes_to_use"] == role["cpuBytesToUse"], key
        seen.add(key)
    assert seen == set(WORKLOADS[name]), [
        (w["kind"], w["name"], w["role"]) for w in out["workloads"]
    ]


def test_argo_re_applies_cause_no_write(
    cluster: LocalCluster,
    admin_api: client.ApiClient,
    ns: str,
    applied: dict[str, Any],
    operator: OperatorProcess,
) -> None:
    before = {name: live(admin_api, ns, u) for name, u in applied.items()}
    time.sleep(2)
    start = time.time()
    for _ in range(ROUNDS):
        for user in (prefill_decode(), multi_node()):
            argo_sync(admin_api, ns, user)
    operator.wait_resyncs()  # what the syncs left is looked at again, twice
    names: list[str] = []
    writes = audit.writes(cluster.audit_log, since=start, names=names, namespace=ns)
    assert sum(n for (_, res), n in writes.items() if res == "llminferenceservices") == 0, names
    for name, user in applied.items():
        after = live(admin_api, ns, user)
        assert after["metadata"]["generation"] == before[name]["metadata"]["generation"]
        assert APPLIED in after["metadata"]["annotations"]
    synced = get_tier(admin_api, ns, "qwen-pd")["status"]["conditions"]
    assert {"type": "SchedulerSynced", "status": "True"}.items() <= next(
        c for c in synced if c["type"] == "SchedulerSynced"
    ).items()


def _given_back(api: client.ApiClient, ns: str, user: dict[str, Any]) -> dict[str, Any] | None:
    """The target once kvtier's record is gone from it, else None."""
    current = live(api, ns, user)
    return None if APPLIED in (current["metadata"].get("annotations") or {}) else current


def _gitops_apply(api: client.ApiClient, ns: str, manifest: dict[str, Any]) -> None:
    """A GitOps controller's forced server-side apply of the manifest as it is in git (Flux's
    kustomize-controller does this)."""
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": ns}}
    Kube(api).request(
        "PATCH",
        _path(manifest["apiVersion"], manifest["kind"], ns, manifest["metadata"]["name"]),
        json.dumps(body),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "kustomize-controller", "force": "true"},
    )


def test_a_worker_the_user_drops_does_not_come_back(
    admin_api: client.ApiClient, ns: str, applied: dict[str, Any]
) -> None:
    """The manifest in git loses spec.worker: server-side apply keeps kvtier's fields there,
    and kvtier must not keep alive a worker that only its own fields make."""
    user = multi_node()
    user["metadata"]["name"] = "qwen-drop"
    _gitops_apply(admin_api, ns, user)
    create_tier(admin_api, ns, "qwen-drop", _tier("qwen-drop"))
    wait_condition(admin_api, ns, "qwen-drop", "Applied", "True", timeout=120)
    assert "VLLM_ADDITIONAL_ARGS" in str(live(admin_api, ns, user)["spec"]["worker"])
    single = copy.deepcopy(user)
    del single["spec"]["worker"]
    single["spec"]["parallelism"] = {"tensor": 1, "data": 8, "dataLocal": 8}
    _gitops_apply(admin_api, ns, single)
    after = eventually(
        lambda: (
            (t := live(admin_api, ns, single))
            and "worker" not in t["spec"]
            and get_tier(admin_api, ns, "qwen-drop")["status"]["plan"]["roles"][0]["templates"]
            == ["spec.template"]
            and t
        ),
        what="spec.worker gone",
    )
    wait_condition(admin_api, ns, "qwen-drop", "Applied", "True", timeout=60)
    assert quantity_to_bytes(_main(after["spec"]["template"])["resources"]["requests"]["memory"])
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "qwen-drop"
    )
    stored = eventually(lambda: _given_back(admin_api, ns, single), what="qwen-drop back")
    assert "worker" not in stored["spec"]
    assert (
        _main(stored["spec"]["template"])["resources"]
        == _main(single["spec"]["template"])["resources"]
    )


def test_deleting_the_tiers_gives_every_template_and_the_scorer_back(
    admin_api: client.ApiClient, ns: str, applied: dict[str, dict[str, Any]]
) -> None:
    for name in applied:
        client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
            "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
        )
    for name, user in applied.items():
        restored = eventually(partial(_given_back, admin_api, ns, user), what=f"{name} back")
        assert restored["spec"] == user["spec"]
    # Argo CD keeps syncing: nothing of kvtier's comes back, nothing of the user's goes.
    for user in (prefill_decode(), multi_node()):
        argo_sync(admin_api, ns, copy.deepcopy(user))
    for user in applied.values():
        assert live(admin_api, ns, user)["spec"] == user["spec"]
