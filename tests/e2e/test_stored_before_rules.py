"""Objects stored before kvtier's CRDs had today's rules, on a control plane of their own with
KServe's real CRDs: the operator says what is wrong with each as a condition instead of
misreporting it (a version taken for a missing object) or going silent (a schedule that
never re-probes). Plus the average context beyond the server's --max-model-len, which
admission cannot see (it is the target's flag)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kvtier.api.policy import CRON_SCHEDULE
from localcluster import LocalCluster
from tests.conftest import api_client
from tests.e2e.conftest import REPO, create_target, inference_service, own_cluster
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

CRDS = REPO / "deploy" / "crds"
STUDY = {"averageContextTokens": 50000, "concurrentSessions": 64}


def _without_new_rules(node: Any) -> Any:
    """A kvtier CRD as an older release shipped it: no apiVersion rule on spec.targetRef, no
    cron rule on spec.probing (the rules of this release, found by what they check)."""
    if isinstance(node, list):
        return [_without_new_rules(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_new_rules(v) for k, v in node.items()}
    rules = [
        r
        for r in out.get("x-kubernetes-validations", [])
        if "self.apiVersion in" not in r["rule"] and CRON_SCHEDULE not in r["rule"]
    ]
    if "x-kubernetes-validations" in out:
        out["x-kubernetes-validations"] = rules
    return out


@pytest.fixture(scope="module")
def older(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Path]]:
    """A control plane whose objects were written through the older CRDs, then upgraded to
    today's: the objects stay stored as they were."""
    old = tmp_path_factory.mktemp("older-crds")
    for path in CRDS.glob("kvcache.io_*.yaml"):
        (old / path.name).write_text(
            yaml.safe_dump(_without_new_rules(yaml.safe_load(path.read_text())))
        )
    with own_cluster("older", kvtier_crds=old) as cluster:
        log = tmp_path_factory.mktemp("older-operator") / "operator.log"
        yield cluster, log


def _policy_ready(api: client.ApiClient) -> dict[str, Any] | None:
    policy: Any = client.CustomObjectsApi(api).get_cluster_custom_object(
        GROUP, VERSION, "kvcachepolicies", "cluster"
    )
    found = [
        c for c in (policy.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"
    ]
    return found[0] if found else None


def test_what_older_crds_admitted_gets_a_condition_naming_it(
    older: tuple[LocalCluster, Path],
) -> None:
    cluster, log = older
    api = api_client(cluster.admin_kubeconfig)
    ns = new_namespace(api, "older")
    create_target(
        api,
        ns,
        inference_service("llama", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct"),
    )
    apply_policy(api, {"probing": {"schedule": "61 25 * * *"}})
    ref = {"kind": "InferenceService", "name": "llama"}
    create_tier(
        api,
        ns,
        "wrong-version",
        {
            "mode": "Plan",
            "targetRef": {**ref, "apiVersion": "serving.kserve.io/v1"},
            "workload": STUDY,
        },
    )
    long_context = {"averageContextTokens": 500000, "concurrentSessions": 64}
    create_tier(api, ns, "too-long", {"mode": "Plan", "targetRef": ref, "workload": long_context})
    cluster.install_crds(CRDS)  # the upgrade to today's CRDs

    operator = OperatorProcess(cluster, log).start()
    try:
        tier = wait_condition(
            api, ns, "wrong-version", "TargetFound", "False", "TargetVersionNotServed"
        )
        [found] = [c for c in tier["status"]["conditions"] if c["type"] == "TargetFound"]
        assert found["message"].startswith(
            "spec.targetRef.apiVersion serving.kserve.io/v1: the cluster does not serve "
            "InferenceService in that version; it serves InferenceService in "
            "serving.kserve.io/v1beta1."
        ), found["message"]

        tier = wait_condition(api, ns, "too-long", "Sized", "False", "ContextExceedsMaxModelLen")
        [sized] = [c for c in tier["status"]["conditions"] if c["type"] == "Sized"]
        assert "averageContextTokens 500000" in sized["message"]
        assert "--max-model-len 131072" in sized["message"]
        assert "sizing" not in tier["status"]

        ready = eventually(
            lambda: (r := _policy_ready(api)) and r["reason"] == "InvalidProbingSchedule" and r,
            what="the policy's Ready says the schedule is invalid",
        )
        assert ready["status"] == "False"
        assert ready["message"].startswith(
            "spec.probing.schedule '61 25 * * *': the minute field '61' is not within 0-59"
        ), ready["message"]
    finally:
        operator.stop()
        print(f"operator log: {log}")
