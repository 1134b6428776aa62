"""An ObjectStore tier applied on the real control plane: the model server gets the obj tier
as vLLM's constructor takes it, its keys from the user's Secret by reference (the operator's
identity cannot read Secrets and never tries), and the tier's removal gives the target back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import create_target, inference_service
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


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> Iterator[str]:
    custom = client.CustomObjectsApi(admin_api)
    try:
        before: Any = custom.get_cluster_custom_object(GROUP, VERSION, "kvcachepolicies", "cluster")
        saved: dict[str, Any] | None = before.get("spec") or {}
    except client.ApiException:
        saved = None
    apply_policy(admin_api, POLICY)
    yield new_namespace(admin_api, "objstore")
    if saved is not None:  # later modules see the policy they had
        apply_policy(admin_api, saved)


def _model(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    target = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", ns, "inferenceservices", name
    )
    model: dict[str, Any] = target["spec"]["predictor"]["model"]
    return model


def test_object_store_tier_on_inference_service(admin_api: client.ApiClient, ns: str) -> None:
    user = inference_service("llama-s3", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct")
    create_target(admin_api, ns, user)
    client.CoreV1Api(admin_api).create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="s3-keys"),
            string_data={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"},
        ),
    )
    create_tier(
        admin_api,
        ns,
        "s3",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "llama-s3"},
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
        },
    )
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
