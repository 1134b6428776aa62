"""`kubectl get` columns on the real control plane with the operator running: the mode in
force when only the policy sets it, the Ready reason, and the policy's own Ready."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from localcluster import LocalCluster
from tests.e2e.conftest import create_target, llm_inference_service
from tests.e2e.kube_helpers import (
    GROUP,
    VERSION,
    apply_policy,
    create_tier,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

POLICY: dict[str, Any] = {"defaults": {"mode": "Plan"}}


def table(cluster: LocalCluster, *args: str) -> list[dict[str, str]]:
    """`kubectl get ... -o wide` as rows keyed by column header."""
    lines = [line for line in cluster.kubectl("get", *args, "-o", "wide").splitlines() if line]
    header = lines[0]
    # A column starts after two spaces or more (headers such as DEFAULT MODE hold one).
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 2 : i] == "  ")]
    bounds = [*starts[1:], None]
    return [
        {header[s:e].strip(): line[s:e].strip() for s, e in zip(starts, bounds, strict=True)}
        for line in lines[1:]
    ]


def policy_condition(api: client.ApiClient) -> dict[str, Any] | None:
    policy = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, "kvcachepolicies", "cluster"
        ),
    )
    for c in (policy.get("status") or {}).get("conditions") or []:
        if c["type"] == "Ready" and c["observedGeneration"] == policy["metadata"]["generation"]:
            return dict(c)
    return None


def test_columns_show_the_policys_mode_and_why(
    cluster: LocalCluster, admin_api: client.ApiClient, operator: OperatorProcess
) -> None:
    apply_policy(admin_api, POLICY)
    ready = eventually(lambda: policy_condition(admin_api), what="the policy's Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Accepted")
    (row,) = table(cluster, "kvcachepolicy")
    assert (row["READY"], row["REASON"], row["DEFAULT MODE"]) == ("True", "Accepted", "Plan")

    ns = new_namespace(admin_api, "columns")
    create_target(
        admin_api, ns, llm_inference_service("gpt-oss", tp=2, model_uri="hf://openai/gpt-oss-120b")
    )
    # No spec.mode: the policy's default applies, and the Mode column says so.
    create_tier(
        admin_api,
        ns,
        "gptoss",
        {
            "targetRef": {"kind": "LLMInferenceService", "name": "gpt-oss"},
            "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
        },
    )
    tier = wait_condition(admin_api, ns, "gptoss", "Ready", "True", "Planned")
    assert tier["status"]["mode"] == "Plan"
    (row,) = table(cluster, "kvt", "-n", ns)
    assert (row["MODE"], row["READY"], row["REASON"]) == ("Plan", "True", "Planned")

    # A tier whose target is missing says why in the Reason column.
    create_tier(
        admin_api,
        ns,
        "orphan",
        {
            "targetRef": {"kind": "LLMInferenceService", "name": "absent"},
            "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
        },
    )
    wait_condition(admin_api, ns, "orphan", "Ready", "False", "TargetNotFound")
    rows = {r["NAME"]: r for r in table(cluster, "kvt", "-n", ns)}
    assert (rows["orphan"]["READY"], rows["orphan"]["REASON"]) == ("False", "TargetNotFound")
