"""KServe's own namespace, where it finds LLMInferenceServiceConfigs after the object's: the
chart passes operator.kserveNamespace to the operator, which indexes and resolves with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvtier.controller.cache import Cache
from kvtier.controller.registration import ENV_KSERVE_NAMESPACE, kserve_namespace
from kvtier.render.picker_version import KSERVE_NAMESPACE, PRESET

REPO = Path(__file__).resolve().parents[2]


def _operator_env() -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO / "deploy" / "manifests" / "operator.yaml").read_text())
    deployment = next(d for d in docs if d and d.get("kind") == "Deployment")
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "operator"
    ]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_manifests_pass_kserves_default_namespace() -> None:
    assert _operator_env()[ENV_KSERVE_NAMESPACE] == KSERVE_NAMESPACE == "kserve"


def test_the_setting_decides_where_the_cache_looks() -> None:
    assert kserve_namespace({}) == "kserve"
    assert kserve_namespace({ENV_KSERVE_NAMESPACE: "opendatahub"}) == "opendatahub"
    cache = Cache(kserve_namespace=kserve_namespace({ENV_KSERVE_NAMESPACE: "opendatahub"}))
    target: dict[str, Any] = {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"namespace": "llm", "name": "qwen"},
        "spec": {"router": {"scheduler": {}}},
    }
    cache.set_tier(
        ("llm", "qwen"),
        {
            "metadata": {"namespace": "llm", "name": "qwen"},
            "spec": {"targetRef": {"kind": "LLMInferenceService", "name": "qwen"}},
        },
    )
    cache.set_target(("LLMInferenceService", "llm", "qwen"), target["apiVersion"], target)
    assert cache.tiers_for_llmisvc_config("opendatahub", PRESET) == [("llm", "qwen")]
    assert cache.tiers_for_llmisvc_config("kserve", PRESET) == []
