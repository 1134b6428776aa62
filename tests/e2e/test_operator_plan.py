"""The operator in Plan mode on the real control plane, under its restricted identity:
status numbers equal the sizing engine's, conditions follow cluster facts, the policy
propagates, and an idle operator writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kvtier.sizing import SizingInput, lookup_model, plan
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.conftest import create_target, inference_service, llm_inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    delete_policy,
    events_for,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

NODE_MEMORY = 2 * 1024**4  # the fake H100 nodes' allocatable memory
STUDY = {"averageContextTokens": 50000, "concurrentSessions": 64}
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": "local-nvme",
            "mountPath": "/var/mnt/nvme",
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
        }
    ],
    "memory": {"overheadFactor": 2.0, "headroom": "4Gi", "maxNodeFraction": 0.5},
}


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "plan")


def expected_sizing(model: str, tp: int, replicas: int, fraction: float = 0.5) -> dict[str, Any]:
    sizing: dict[str, Any] = plan(
        SizingInput(
            geometry=lookup_model(model),
            average_context_tokens=STUDY["averageContextTokens"],
            concurrent_sessions=STUDY["concurrentSessions"],
            replicas=replicas,
            tensor_parallel_size=tp,
            node_memory_bytes=NODE_MEMORY,
            model_server_pods_per_node=8 // tp,
            max_node_memory_fraction=fraction,
            available_disk_types=frozenset({"NVMe", "CephFS"}),
        )
    ).to_status()["sizing"]
    return sizing


@pytest.mark.parametrize(
    ("name", "target", "model", "tp", "replicas"),
    [
        (
            "nemotron",
            llm_inference_service(
                "nemotron-ultra", tp=8, model_uri="hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
            ),
            "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1",
            8,
            1,
        ),
        (
            "llama70b",
            inference_service(
                "llama-70b",
                tp=4,
                model_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
                min_replicas=1,
                max_replicas=3,
            ),
            "meta-llama/Llama-3.1-70B-Instruct",
            4,
            3,
        ),
        (
            "gptoss",
            llm_inference_service(
                "gpt-oss",
                tp=2,
                replicas=2,
                model_uri="hf://openai/gpt-oss-120b",
                api_version="serving.kserve.io/v1alpha1",
            ),
            "openai/gpt-oss-120b",
            2,
            2,
        ),
    ],
)
def test_status_matches_the_sizing_engine(
    admin_api: client.ApiClient,
    ns: str,
    name: str,
    target: dict[str, Any],
    model: str,
    tp: int,
    replicas: int,
) -> None:
    create_target(admin_api, ns, target)
    create_tier(
        admin_api,
        ns,
        name,
        {
            "mode": "Plan",
            "targetRef": {"kind": target["kind"], "name": target["metadata"]["name"]},
            "workload": STUDY,
            "disk": {"type": "Auto", "nvme": {"pool": "local-nvme"}},
        },
    )
    tier = wait_condition(admin_api, ns, name, "Ready", "True", "Planned")
    status = tier["status"]
    assert status["sizing"] == expected_sizing(model, tp, replicas)
    assert status["observedGeneration"] == tier["metadata"]["generation"]
    assert status["plan"]["summary"].startswith("Plan mode")
    sized = {c["type"]: c for c in status["conditions"]}["Sized"]
    assert sized["status"] == "True" and str(status["sizing"]["bytesPerToken"]) in sized["message"]
    assert {e["field"]: e["source"] for e in status["effective"]}["mode"] == "Tier"
    # Events follow the status write that carried the decision.
    eventually(
        lambda: "Planned" in {e.reason for e in events_for(admin_api, ns, name)},
        what="Events for the decisions",
    )


def test_printer_columns_show_the_decision(cluster: LocalCluster, ns: str) -> None:
    eventually(lambda: "nemotron" in cluster.kubectl("get", "kvt", "-n", ns), what="tier listed")
    out = cluster.kubectl("get", "kvt", "-n", ns, "nemotron")
    header, row = out.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "TARGET", "TOPOLOGY", "CPU", "TIER", "DISK"]
    assert "nemotron-ultra" in row and "True" in row
    assert "CPUAnd" in row or "CPUOnly" in row


def test_target_created_after_the_tier(admin_api: client.ApiClient, ns: str) -> None:
    spec = {
        "mode": "Plan",
        "targetRef": {"kind": "LLMInferenceService", "name": "late"},
        "workload": STUDY,
    }
    create_tier(admin_api, ns, "late", spec)
    tier = wait_condition(admin_api, ns, "late", "TargetFound", "False", "TargetNotFound")
    assert "sizing" not in tier["status"]
    create_target(
        admin_api,
        ns,
        llm_inference_service(
            "late", tp=8, model_uri="hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
        ),
    )
    tier = wait_condition(admin_api, ns, "late", "Ready", "True", "Planned")
    assert tier["status"]["sizing"]["bytesPerToken"] == 262144


@pytest.mark.parametrize(
    ("spec_patch", "ctype", "reason", "words"),
    [
        (
            {"disk": {"type": "NVMe", "nvme": {"pool": "no-such-pool"}}},
            "PolicyCompliant",
            "UnknownNVMePool",
            "spec.disk.nvme.pool",
        ),
        ({"model": {"name": "acme/unknown-model-9b"}}, "Sized", "ModelUnknown", "spec.model"),
        ({"model": {"tensorParallelSize": 3}}, "Sized", "SizingFailed", "tensorParallelSize"),
        (
            {"model": {"configMapRef": {"name": "missing-config", "key": "config.json"}}},
            "Sized",
            "ConfigMapNotFound",
            "spec.model.configMapRef",
        ),
    ],
    ids=["unknown-pool", "unknown-model", "tp-does-not-fit", "configmap-missing"],
)
def test_cluster_fact_errors_are_conditions_and_events(
    admin_api: client.ApiClient,
    ns: str,
    spec_patch: dict[str, Any],
    ctype: str,
    reason: str,
    words: str,
) -> None:
    name = f"bad-{reason.lower()}"
    create_target(admin_api, ns, llm_inference_service(name, tp=8, model_uri="hf://x/y"))
    spec = {
        "mode": "Plan",
        "targetRef": {"kind": "LLMInferenceService", "name": name},
        "workload": STUDY,
        "model": {"name": "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"},
        **spec_patch,
    }
    if "model" in spec_patch:
        spec["model"] = {"name": "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1", **spec_patch["model"]}
    create_tier(admin_api, ns, name, spec)
    tier = wait_condition(admin_api, ns, name, ctype, "False", reason)
    conds = {c["type"]: c for c in tier["status"]["conditions"]}
    assert words in conds[ctype]["message"]
    assert conds["Ready"]["status"] == "False"
    eventually(
        lambda: any(
            e.reason == reason and e.type == "Warning" for e in events_for(admin_api, ns, name)
        ),
        what=f"a Warning event {reason}",
    )


def test_configmap_appearing_later_fills_status(admin_api: client.ApiClient, ns: str) -> None:
    # The missing ConfigMap above now appears with a real config.json: sizing follows.
    config = (
        '{"architectures":["LlamaForCausalLM"],"model_type":"llama","num_hidden_layers":80,'
        '"num_attention_heads":64,"num_key_value_heads":8,"hidden_size":8192,'
        '"torch_dtype":"bfloat16"}'
    )
    client.CoreV1Api(admin_api).create_namespaced_config_map(
        ns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="missing-config"), data={"config.json": config}
        ),
    )
    tier = wait_condition(admin_api, ns, "bad-configmapnotfound", "Sized", "True")
    # 80 layers x 8 heads x 128 dim x 2 B x 2 (K,V) = Llama-3.1-70B's 327,680 B/token
    assert tier["status"]["sizing"]["bytesPerToken"] == 327680


def test_policy_change_propagates(admin_api: client.ApiClient, ns: str) -> None:
    before = get_tier(admin_api, ns, "nemotron")["status"]["sizing"]["cpuBytesToUse"]
    apply_policy(admin_api, {**POLICY, "memory": {**POLICY["memory"], "maxNodeFraction": 0.25}})
    expected = expected_sizing("nvidia/Llama-3_1-Nemotron-Ultra-253B-v1", 8, 1, fraction=0.25)
    tier = eventually(
        lambda: (t := get_tier(admin_api, ns, "nemotron"))["status"]["sizing"] == expected and t,
        what="policy change reflected in status.sizing",
    )
    assert tier["status"]["sizing"]["cpuBytesToUse"] < before
    sources = {e["field"]: (e["source"], e["value"]) for e in tier["status"]["effective"]}
    assert sources["memory.maxNodeFraction"] == ("Policy", "0.25")
    delete_policy(admin_api)
    tier = eventually(
        lambda: (
            (t := get_tier(admin_api, ns, "nemotron"))
            and {e["field"]: e["source"] for e in t["status"]["effective"]}[
                "memory.maxNodeFraction"
            ]
            == "Default"
            and t
        ),
        what="built-in defaults after the policy is deleted",
    )
    apply_policy(admin_api, POLICY)


def test_idle_operator_writes_nothing_over_two_resyncs(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    eventually(lambda: wait_condition(admin_api, ns, "nemotron", "Ready", "True"), what="settled")
    # In-flight reconciles done, also of other modules' tiers on this shared cluster, which
    # the policy changes above reach too (a fixed 3 s was too short on a busy run).
    audit.wait_quiet(cluster.audit_log, operator.resync_seconds or 5.0)
    seen: list[str] = []
    counted = audit.idle_writes(cluster.audit_log, operator, names=seen)
    assert sum(counted.values()) == 0, seen
    # ...and it did write before, so the audit count is real.
    assert audit.writes(cluster.audit_log)[("patch", "kvcachetiers/status")] > 0


def test_metrics_describe_the_tiers(operator: OperatorProcess, ns: str) -> None:
    text = operator.metrics()
    assert f'kvtier_tier_working_set_bytes{{name="nemotron",namespace="{ns}"}}' in text
    assert 'kvtier_reconcile_total{result="success"}' in text
    assert "kvtier_reconcile_duration_seconds_bucket" in text
