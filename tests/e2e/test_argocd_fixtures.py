"""Statuses the operator really writes, judged by the Argo CD health check; with
KVTIER_WRITE_FIXTURES=1 they are (re)written to tests/fixtures/argocd for the unit tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.e2e.conftest import create_target, llm_inference_service
from tests.e2e.kube_helpers import GROUP, VERSION, create_tier, new_namespace, wait_condition
from tests.e2e.operator_process import OperatorProcess
from tests.unit.test_argocd_health import FIXTURE_HEALTH, FIXTURES, run_health

WORKLOAD = {"averageContextTokens": 8000, "concurrentSessions": 4}
FIXED_TIME = "2026-01-01T00:00:00Z"


def spec(target: str, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "Plan",
        "targetRef": {"kind": "LLMInferenceService", "name": target},
        "workload": WORKLOAD,
        **extra,
    }


def normalized(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    """Only what a health check reads, stable across runs (no uids, times or random names)."""
    meta = obj["metadata"]
    status = dict(obj.get("status") or {})
    status["conditions"] = [
        {**c, "lastTransitionTime": FIXED_TIME} for c in status.get("conditions") or []
    ]
    kept = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": meta["name"], "namespace": ns, "generation": meta["generation"]},
        "spec": obj["spec"],
        "status": status,
    }
    result: dict[str, Any] = json.loads(json.dumps(kept).replace(meta["namespace"], "llm"))
    return result


def condition_shape(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted(
        (c["type"], c["status"], c["reason"]) for c in obj["status"].get("conditions") or []
    )


@pytest.fixture(scope="module")
def statuses(admin_api: client.ApiClient, operator: OperatorProcess) -> dict[str, dict[str, Any]]:
    ns = new_namespace(admin_api, "argocd")
    model = "hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
    create_target(admin_api, ns, llm_inference_service("nemotron-ultra", tp=8, model_uri=model))
    create_tier(admin_api, ns, "ready", spec("nemotron-ultra"))
    create_tier(admin_api, ns, "target-missing", spec("no-such-server"))
    create_tier(
        admin_api, ns, "model-unknown", spec("nemotron-ultra", model={"name": "acme/unknown-9b"})
    )
    out = {
        "ready": wait_condition(admin_api, ns, "ready", "Ready", "True", "Planned"),
        "target-missing": wait_condition(
            admin_api, ns, "target-missing", "TargetFound", "False", "TargetNotFound"
        ),
        "model-unknown": wait_condition(
            admin_api, ns, "model-unknown", "Sized", "False", "ModelUnknown"
        ),
    }
    # The response to a spec change is the object before the operator can have seen it.
    bumped = cast(
        dict[str, Any],
        client.CustomObjectsApi(admin_api).patch_namespaced_custom_object(
            GROUP, VERSION, ns, "kvcachetiers", "ready",
            {"spec": {"workload": {**WORKLOAD, "concurrentSessions": 8}}},
        ),
    )  # fmt: skip
    assert bumped["metadata"]["generation"] > bumped["status"]["observedGeneration"]
    out["generation-lag"] = bumped
    return {name: normalized(obj, ns) for name, obj in out.items()}


@pytest.mark.parametrize("name", sorted(FIXTURE_HEALTH))
def test_health_of_real_statuses(statuses: dict[str, dict[str, Any]], name: str) -> None:
    health, words = FIXTURE_HEALTH[name]
    hs = run_health(statuses[name])
    assert hs["status"] == health, hs
    assert words in hs["message"], hs


def test_committed_fixtures_match_the_operator(statuses: dict[str, dict[str, Any]]) -> None:
    if os.environ.get("KVTIER_WRITE_FIXTURES") == "1":
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for name, obj in statuses.items():
            Path(FIXTURES, f"{name}.json").write_text(json.dumps(obj, indent=2) + "\n")
    for name, obj in statuses.items():
        committed = json.loads((FIXTURES / f"{name}.json").read_text())
        assert condition_shape(committed) == condition_shape(obj), (
            f"{name}: the operator's conditions changed; rerun with KVTIER_WRITE_FIXTURES=1"
        )
