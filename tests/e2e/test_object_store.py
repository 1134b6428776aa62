"""An ObjectStore tier applied on the real control plane: the model server gets the obj tier
as vLLM's constructor takes it, its keys from the user's Secret by reference (the operator's
identity cannot read Secrets and never tries), and the tier's removal gives the target back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import create_target, inference_service, llm_inference_service
from tests.e2e.kube_helpers import (
    GROUP,
    VERSION,
    apply_policy,
    create_tier,
    eventually,
    exists,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

POLICY: dict[str, Any] = {"objectStore": {"allowed": True, "maxP99Seconds": 2}}
V1ALPHA1 = "serving.kserve.io/v1alpha1"


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> Iterator[str]:
    custom = client.CustomObjectsApi(admin_api)
    try:
        before: Any = custom.get_cluster_custom_object(GROUP, VERSION, "kvcachepolicies", "cluster")
        saved: dict[str, Any] | None = before.get("spec") or {}
    except client.ApiException:
        saved = None
    apply_policy(admin_api, POLICY)
    ns = new_namespace(admin_api, "objstore")
    client.CoreV1Api(admin_api).create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="s3-keys"),
            string_data={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"},
        ),
    )
    yield ns
    if saved is not None:  # later modules see the policy they had
        apply_policy(admin_api, saved)


def _model(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    target = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", ns, "inferenceservices", name
    )
    model: dict[str, Any] = target["spec"]["predictor"]["model"]
    return model


def _llmisvc_main(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    target = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1alpha1", ns, "llminferenceservices", name
    )
    main: dict[str, Any] = target["spec"]["template"]["containers"][0]
    return main


def _s3_tier(kind: str, name: str) -> dict[str, Any]:
    """An Apply tier with an ObjectStore disk tier whose keys come from Secret s3-keys."""
    return {
        "mode": "Apply",
        "targetRef": {"kind": kind, "name": name},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
        "cpu": {"size": "64Gi"},
        "disk": {
            "type": "ObjectStore",
            "objectStore": {
                "acknowledgeTailLatency": True,
                "bucket": "kv-cache",
                "endpoint": "https://s3.example.com:9000",
                "credentialsSecretRef": {"name": "s3-keys"},
            },
        },
    }


def test_object_store_tier_on_inference_service(admin_api: client.ApiClient, ns: str) -> None:
    user = inference_service("llama-s3", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct")
    create_target(admin_api, ns, user)
    create_tier(admin_api, ns, "s3", _s3_tier("InferenceService", "llama-s3"))
    wait_condition(admin_api, ns, "s3", "Ready", "True", "Applied", timeout=90)
    model = _model(admin_api, ns, "llama-s3")
    args = model["args"]
    assert args[:4] == user["spec"]["predictor"]["model"]["args"]  # the user's args first
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    (tier,) = config["kv_connector_extra_config"]["secondary_tiers"]
    assert tier == {
        "type": "obj",
        "store_config": {
            "bucket": "kv-cache",
            "endpoint_override": "s3.example.com:9000",
            "scheme": "https",
            # vLLM 0.24's ObjStoreConfig requires the keys: Kubernetes expands these.
            "access_key": "$(AWS_ACCESS_KEY_ID)",
            "secret_key": "$(AWS_SECRET_ACCESS_KEY)",
        },
    }
    env = {e["name"]: e for e in model["env"]}
    assert env["HF_HUB_OFFLINE"]["value"] == "1"  # the user's env survives
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"] == {"secretKeyRef": {"name": "s3-keys", "key": key}}

    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "s3"
    )
    eventually(lambda: not exists(lambda: get_tier(admin_api, ns, "s3")), what="tier deleted")
    assert _model(admin_api, ns, "llama-s3") == user["spec"]["predictor"]["model"]


def test_flag_form_take_back_is_not_taken_for_an_unkept_write(
    admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    """An LLMInferenceService v1alpha1 with the user's own VLLM_ADDITIONAL_ARGS: kvtier puts
    the object store's keys before it (Kubernetes expands $(VAR) only from earlier entries),
    so the take-back restores the user's value at one index and removes the keys before it.
    The target comes back as the user wrote it, and the operator does not log that the API
    server did not keep the take-back (it did: the restored value moved to env[0])."""
    user = llm_inference_service(
        "gpt-s3", tp=2, model_uri="hf://openai/gpt-oss-120b", api_version=V1ALPHA1
    )
    user["spec"]["template"]["containers"][0]["env"] = [
        {"name": "VLLM_ADDITIONAL_ARGS", "value": "--max-model-len 131072"}
    ]
    create_target(admin_api, ns, user)
    spec = _s3_tier("LLMInferenceService", "gpt-s3")
    create_tier(
        admin_api,
        ns,
        "gpt-s3",
        {**spec, "targetRef": {**spec["targetRef"], "apiVersion": V1ALPHA1}},
    )
    wait_condition(admin_api, ns, "gpt-s3", "Ready", "True", "Applied", timeout=90)
    env = _llmisvc_main(admin_api, ns, "gpt-s3")["env"]
    assert [e["name"] for e in env] == [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "VLLM_ADDITIONAL_ARGS",
    ]
    mark = operator.log_path.stat().st_size
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "gpt-s3"
    )
    eventually(lambda: not exists(lambda: get_tier(admin_api, ns, "gpt-s3")), what="tier deleted")
    assert _llmisvc_main(admin_api, ns, "gpt-s3") == user["spec"]["template"]["containers"][0]
    log = operator.log_path.read_text()[mark:]
    assert "did not keep" not in log, log
