"""Which parts an apply would replace, read from the schema the API server serves (KServe's
real full and minimal CRDs), never from managedFields: the minimal CRDs' atomic spec is seen
on an object whose managedFields are empty, and kvtier then writes nothing."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from kvtier.policy.atomic import atomic_verdict
from kvtier.policy.contract import Facts
from kvtier.policy.decide import decide
from kvtier.render import DesiredWrite
from kvtier.render.served_schema import kind_schema, replaced_parts, resolve
from tests.served_schemas import schemas_for, served_schema

ISVC = ("serving.kserve.io/v1beta1", "InferenceService")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def isvc(managed_fields: list[Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "llama", "namespace": "llm", "uid": "u-1"}
    if managed_fields is not None:
        meta["managedFields"] = managed_fields
    return {
        "apiVersion": ISVC[0],
        "kind": ISVC[1],
        "metadata": meta,
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 2,
                "nodeSelector": {"gpu": "h100"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "storageUri": "hf://meta-llama/Llama-3.1-70B-Instruct",
                    "args": ["--tensor-parallel-size=4"],
                    "env": [{"name": "HF_HOME", "value": "/models"}],
                    "resources": {"limits": {"nvidia.com/gpu": "4", "memory": "48Gi"}},
                },
                "volumes": [{"name": "models", "emptyDir": {}}],
                "somethingUnknown": {"kept": True},
            }
        },
    }


def apply_body() -> dict[str, Any]:
    """The shape of kvtier's apply to an InferenceService: env by name, mounts by path,
    memory."""
    return {
        "apiVersion": ISVC[0],
        "kind": ISVC[1],
        "metadata": {"name": "llama", "namespace": "llm", "annotations": {"kvcache.io/a": "x"}},
        "spec": {
            "predictor": {
                "model": {
                    "env": [{"name": "PYTHONHASHSEED", "value": "0"}],
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    "resources": {"requests": {"memory": "200Gi"}},
                }
            }
        },
    }


def test_full_crd_merges_every_part_kvtier_applies() -> None:
    schema = served_schema(*ISVC)
    assert replaced_parts(schema, apply_body(), isvc()) == []


def test_minimal_crd_replaces_the_whole_spec() -> None:
    schema = served_schema(*ISVC, variant="minimal")
    assert replaced_parts(schema, apply_body(), isvc()) == ["spec"]


@pytest.mark.parametrize(
    "managed_fields",
    [None, [], [{}], [{"manager": "kubectl", "operation": "Update", "fieldsV1": {}}]],
    ids=["absent", "empty", "one-empty-entry", "no-fields"],
)
def test_atomic_spec_is_seen_whatever_the_managed_fields(managed_fields: Any) -> None:
    """The data-loss case: an object restored from a dump, with managedFields stripped."""
    target = isvc(managed_fields)
    write = DesiredWrite("Apply", *ISVC, "llama", "llm", apply_body(), "kvtier's fields")
    verdict = atomic_verdict({ISVC[0]: served_schema(*ISVC, variant="minimal")}, [write], target)
    assert verdict is not None
    assert (verdict.type, verdict.status, verdict.reason) == ("Applied", "False", "AtomicSpec")
    assert "spec" in verdict.message and "full CRDs" in verdict.message


def test_atomic_list_with_the_users_items_is_a_replacement() -> None:
    """InferenceService's predictor.volumes has no list type in KServe's full CRD: an apply
    of kvtier's volume alone would drop the user's (kvtier carries the list whole instead)."""
    body = apply_body()
    body["spec"]["predictor"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert replaced_parts(served_schema(*ISVC), body, isvc()) == ["spec.predictor.volumes"]
    # The same list where the object holds none, or holds exactly it, loses nothing.
    empty = isvc()
    del empty["spec"]["predictor"]["volumes"]
    assert replaced_parts(served_schema(*ISVC), body, empty) == []
    same = isvc()
    same["spec"]["predictor"]["volumes"] = copy.deepcopy(body["spec"]["predictor"]["volumes"])
    assert replaced_parts(served_schema(*ISVC), body, same) == []


def test_a_list_carried_whole_is_not_refused() -> None:
    """kvtier's apply carries the atomic volumes whole, the user's items with its own
    (DesiredWrite.carried): AtomicSpec leaves that list alone, and still sees any other."""
    body = apply_body()
    body["spec"]["predictor"]["volumes"] = [
        *isvc()["spec"]["predictor"]["volumes"],
        {"name": "kvtier-dshm", "emptyDir": {"medium": "Memory"}},
    ]
    schemas = {ISVC[0]: served_schema(*ISVC)}

    def write(carried: tuple[str, ...]) -> DesiredWrite:
        return DesiredWrite("Apply", *ISVC, "llama", "llm", body, "kvtier's", carried, 1)

    assert atomic_verdict(schemas, [write(("spec.predictor.volumes",))], isvc()) is None
    refused = atomic_verdict(schemas, [write(())], isvc())
    assert refused is not None and refused.reason == "AtomicSpec"
    assert "spec.predictor.volumes" in refused.message


def test_keyed_list_items_are_matched_by_key() -> None:
    """LLMInferenceService's template.containers is a map list by name: kvtier's item merges
    into the user's container; an atomic list inside a user's item would be replaced."""
    schema = served_schema("serving.kserve.io/v1alpha2", "LLMInferenceService")
    live = {
        "spec": {"template": {"containers": [{"name": "main", "args": ["--port=8000"]}]}},
    }
    merge = {"spec": {"template": {"containers": [{"name": "main", "env": [{"name": "A"}]}]}}}
    assert replaced_parts(schema, merge, live) == []
    replace = {"spec": {"template": {"containers": [{"name": "main", "args": ["--x"]}]}}}
    assert replaced_parts(schema, replace, live) == ["spec.template.containers[name=main].args"]
    new_item = {"spec": {"template": {"containers": [{"name": "side", "args": ["--x"]}]}}}
    assert replaced_parts(schema, new_item, live) == []


def test_kind_schema_reads_the_group_version_document() -> None:
    meta = {"type": "object", "properties": {"name": {"type": "string"}}}
    document = {
        "components": {
            "schemas": {
                "io.k8s.ObjectMeta": meta,
                "io.kserve.serving.v1beta1.InferenceService": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": [
                        {"group": "serving.kserve.io", "version": "v1beta1", "kind": "X"}
                    ],
                    "properties": {
                        "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.ObjectMeta"}]},
                        "spec": {
                            "type": "object",
                            "x-kubernetes-map-type": "atomic",
                            "description": "how it merges is all a resolved schema keeps",
                        },
                    },
                },
            }
        }
    }
    found = kind_schema(document, "serving.kserve.io/v1beta1", "X")
    # Its merge shape: metadata says nothing of how it merges, spec is atomic.
    assert found == {"properties": {"spec": {"x-kubernetes-map-type": "atomic"}}}
    components: dict[str, Any] = document["components"]["schemas"]
    whole = resolve(components, components["io.kserve.serving.v1beta1.InferenceService"])
    assert whole["properties"]["metadata"] == meta
    assert whole["properties"]["spec"] == {"type": "object", "x-kubernetes-map-type": "atomic"}
    assert kind_schema(document, "serving.kserve.io/v1beta1", "Y") is None
    assert kind_schema(document, "serving.kserve.io/v1", "X") is None


def _tier() -> dict[str, Any]:
    return {
        "apiVersion": "kvcache.io/v1alpha1",
        "kind": "KVCacheTier",
        "metadata": {"name": "t", "namespace": "llm", "generation": 1, "uid": "t-1"},
        "spec": {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "llama"},
            "model": {"name": "llama-3.1-70b"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
            "disk": {"type": "None"},
        },
    }


NODES = [
    {
        "metadata": {"name": "gpu-0", "labels": {}},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "2Ti"}},
    }
]


def _conditions(facts: Facts) -> dict[str, dict[str, Any]]:
    decision = decide(facts)
    assert decision.status["conditions"]
    return {c["type"]: c for c in decision.status["conditions"]}


@pytest.mark.parametrize("managed_fields", [None, [{}]], ids=["absent", "one-empty-entry"])
def test_decide_writes_nothing_to_an_atomic_spec(managed_fields: Any) -> None:
    target = isvc(managed_fields)
    facts = Facts(
        _tier(), None, target, None, NODES, NOW, target_schemas=schemas_for(target, "minimal")
    )
    decision = decide(facts)
    assert decision.writes == []
    conditions = {c["type"]: c for c in decision.status["conditions"]}
    assert conditions["Applied"]["reason"] == "AtomicSpec"
    assert conditions["Ready"]["status"] == "False"
    assert "Cannot apply" in decision.status["plan"]["summary"]


def test_decide_writes_to_the_full_crd_and_not_without_a_schema() -> None:
    target = isvc([{}])
    full = decide(
        Facts(_tier(), None, target, None, NODES, NOW, target_schemas=schemas_for(target))
    )
    assert any(w.kind == "InferenceService" for w in full.writes)
    unknown = Facts(_tier(), None, target, None, NODES, NOW, target_schemas={})
    conditions = _conditions(unknown)
    assert conditions["Applied"]["reason"] == "SchemaUnknown"
    assert conditions["Ready"]["status"] == "False"
    assert decide(unknown).writes == []


def test_each_apply_is_judged_by_the_schema_of_the_version_it_is_sent_as() -> None:
    """KServe's minimal LLMInferenceService CRD keeps v1alpha2 structural and makes v1alpha1's
    spec atomic. An object read as v1alpha2 that another manager writes as v1alpha1 gets the
    v1alpha1 form: that apply would replace the whole spec, so nothing is written."""
    target = {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {
            "name": "nemotron",
            "namespace": "llm",
            "managedFields": [
                {
                    "manager": "argocd-controller",
                    "operation": "Apply",
                    "apiVersion": "serving.kserve.io/v1alpha1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {}},
                }
            ],
        },
        "spec": {
            "model": {"uri": "hf://meta-llama/Llama-3.1-70B-Instruct"},
            "parallelism": {"tensor": 8},
            "template": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.24.0"}]},
        },
    }
    tier = _tier()
    tier["spec"]["targetRef"] = {"kind": "LLMInferenceService", "name": "nemotron"}
    schemas = schemas_for(target, "minimal")
    decision = decide(Facts(tier, None, target, None, NODES, NOW, target_schemas=schemas))
    assert decision.writes == []
    applied = {c["type"]: c for c in decision.status["conditions"]}["Applied"]
    assert applied["reason"] == "AtomicSpec"
    assert "serving.kserve.io/v1alpha1" in applied["message"]
    # With only the version it was read as, the v1alpha1 apply has no schema: still nothing.
    only_read = {"serving.kserve.io/v1alpha2": schemas["serving.kserve.io/v1alpha2"]}
    unknown = decide(Facts(tier, None, target, None, NODES, NOW, target_schemas=only_read))
    assert unknown.writes == []
    reasons = {c["type"]: c["reason"] for c in unknown.status["conditions"]}
    assert reasons["Applied"] == "SchemaUnknown"
