"""Writes the API server does not keep (a schema prunes or changes them): found from its
answer, named by path, and held back until the object changes, so kvtier never loops."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from kvtier.policy.provisioning import (
    Unkept,
    UnkeptKey,
    expected_fields,
    hold_unkept,
    schema_mismatch_verdict,
    unkept_paths,
    unkept_write,
)
from kvtier.render.result import DesiredWrite

KEY = ("InferenceService", "llm", "llama")
CLAIM = {"metadata": {"labels": {"kvcache.io/tier-id": "abc"}}, "spec": {"storageClassName": "x"}}


def _apply(body: dict[str, Any]) -> DesiredWrite:
    return DesiredWrite("Apply", "serving.kserve.io/v1beta1", *KEY[:1], KEY[2], KEY[1], body, "")


def _body() -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "namespace": "llm"},
        "spec": {
            "predictor": {
                "volumes": [{"name": "kv", "ephemeral": {"volumeClaimTemplate": CLAIM}}],
                "model": {"resources": {"requests": {"memory": "10Gi"}}},
            }
        },
    }


def _pruned(generation: int = 7) -> dict[str, Any]:
    """What a server whose schema has no properties under volumeClaimTemplate.metadata
    answers: the labels are gone."""
    answer = copy.deepcopy(_body())
    template = answer["spec"]["predictor"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]
    template["metadata"] = {}
    answer["metadata"]["generation"] = generation
    return answer


def test_paths_name_list_items_by_key() -> None:
    assert unkept_paths(_pruned(), _body()) == [
        "spec.predictor.volumes[kv].ephemeral.volumeClaimTemplate.metadata.labels"
    ]
    assert unkept_paths(_body(), _body()) == []
    changed = copy.deepcopy(_body())
    changed["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] = "11Gi"
    assert unkept_paths(changed, _body()) == ["spec.predictor.model.resources.requests.memory"]


def test_a_kept_write_is_not_unkept() -> None:
    answer = {**copy.deepcopy(_body()), "status": {"x": 1}}
    assert unkept_write(_apply(_body()), answer) is None


def test_a_quantity_stored_in_its_canonical_form_is_kept() -> None:
    """Built-in kinds (a Deployment's PodSpec) answer a quantity in canonical form: the same
    amount is kept, a different one is not."""
    body = _body()
    body["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] = "278977527808"
    answer = copy.deepcopy(body)
    answer["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] = "272438992Ki"
    assert unkept_write(_apply(body), answer) is None
    answer["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] = "272438993Ki"
    assert unkept_write(_apply(body), answer) is not None
    names = copy.deepcopy(body)
    names["spec"]["predictor"]["volumes"][0]["name"] = "kv2"
    assert unkept_write(_apply(body), names) is not None


def test_pruned_write_is_held_until_the_object_changes() -> None:
    write = _apply(_body())
    unkept = unkept_write(write, _pruned(generation=7))
    assert unkept is not None and unkept.generation == 7
    record: dict[UnkeptKey, Unkept] = {(*KEY, "Apply"): unkept}
    send, held = hold_unkept([write], record, {KEY: _pruned(generation=7)})
    assert (send, [w for w, _ in held]) == ([], [write])
    verdict = schema_mismatch_verdict(held)
    assert (verdict.type, verdict.status, verdict.reason) == ("Applied", "False", "SchemaMismatch")
    assert "volumeClaimTemplate.metadata.labels" in verdict.message
    # Someone changed the object (a new generation): one more try.
    send, held = hold_unkept([write], record, {KEY: _pruned(generation=8)})
    assert (send, held) == ([write], [])
    # The tier asks for something else: that is a different write, sent.
    other = _apply({**_body(), "spec": {"predictor": {"model": {}}}})
    send, held = hold_unkept([other], record, {KEY: _pruned(generation=7)})
    assert (send, held) == ([other], [])


def test_json_patch_expectation_is_what_its_ops_set() -> None:
    ops = [
        {"op": "test", "path": "/spec/predictor/volumes", "value": []},
        {"op": "replace", "path": "/spec/predictor/volumes", "value": [{"name": "kv"}]},
        {"op": "add", "path": "/metadata/annotations/a~1b", "value": "x"},
    ]
    patch = DesiredWrite("Patch", "v1", "InferenceService", "llama", "llm", {"jsonPatch": ops}, "")
    assert expected_fields(patch) == {
        "spec": {"predictor": {"volumes": [{"name": "kv"}]}},
        "metadata": {"annotations": {"a/b": "x"}},
    }
    kept = {
        "metadata": {"annotations": {"a/b": "x"}},
        "spec": {"predictor": {"volumes": [{"name": "kv"}]}},
    }
    assert unkept_write(patch, kept) is None
    assert unkept_write(patch, {"metadata": {}, "spec": {"predictor": {}}}) is not None


def test_a_json_patch_into_a_list_item_is_kept_when_the_item_holds_it() -> None:
    """A plain Deployment's flag: a patch of containers/1/args. Kept when that container's
    args are what the patch set; named by index when they are not."""
    args = ["--max-model-len", "131072", "--kv-transfer-config", "{}"]
    ops = [
        {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "vllm"},
        {"op": "replace", "path": "/spec/template/spec/containers/1/args", "value": args},
    ]
    write = DesiredWrite("Patch", "apps/v1", "Deployment", "llama", "llm", {"jsonPatch": ops}, "")
    containers = [{"name": "side", "args": ["tail"]}, {"name": "vllm", "args": list(args)}]
    answer = {"spec": {"template": {"spec": {"containers": containers}}}}
    assert unkept_write(write, answer) is None
    containers[1]["args"] = args[:2]
    unkept = unkept_write(write, answer)
    assert unkept is not None
    assert unkept.paths == ("spec.template.spec.containers[1].args",)


def _take_back(user: list[dict[str, Any]], applied: list[dict[str, Any]]) -> DesiredWrite:
    """The take-back of a flag-form LLMInferenceService whose object-store keys kvtier put
    before VLLM_ADDITIONAL_ARGS: the user's value restored at env/2, then the keys removed
    from the end (env/1, env/0), as pod_unapply_ops orders them."""
    env = "/spec/template/containers/0/env"
    ops = [
        {"op": "test", "path": f"{env}/2/value", "value": applied[2]["value"]},
        {"op": "replace", "path": f"{env}/2/value", "value": user[0]["value"]},
        {"op": "test", "path": f"{env}/1/name", "value": applied[1]["name"]},
        {"op": "remove", "path": f"{env}/1"},
        {"op": "test", "path": f"{env}/0/name", "value": applied[0]["name"]},
        {"op": "remove", "path": f"{env}/0"},
        {
            "op": "replace",
            "path": "/spec/template/containers/0/resources/limits/memory",
            "value": "1",
        },
    ]
    return DesiredWrite(
        "Patch",
        "serving.kserve.io/v1alpha1",
        "LLMInferenceService",
        "gpt",
        "llm",
        {"jsonPatch": ops},
        "",
    )


def test_a_take_back_that_removes_items_before_a_restored_one_is_kept() -> None:
    """The restored value is judged where it ends up (env/0), not where its op wrote it."""

    user = [{"name": "VLLM_ADDITIONAL_ARGS", "value": "--max-model-len 131072"}]
    applied: list[dict[str, Any]] = [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "a"}}},
        {
            "name": "AWS_SECRET_ACCESS_KEY",
            "valueFrom": {"secretKeyRef": {"name": "s3", "key": "b"}},
        },
        {
            "name": "VLLM_ADDITIONAL_ARGS",
            "value": "--max-model-len 131072 --kv-transfer-config '{}'",
        },
    ]
    before = {
        "spec": {
            "template": {
                "containers": [
                    {"name": "main", "env": applied, "resources": {"limits": {"memory": "2"}}}
                ]
            }
        }
    }
    write = _take_back(user, applied)
    answer = jsonpatch.apply_patch(before, write.body["jsonPatch"])
    assert answer["spec"]["template"]["containers"][0]["env"] == user
    assert expected_fields(write) == {
        "spec": {
            "template": {
                "containers": {
                    "0": {
                        "env": {"0": {"value": "--max-model-len 131072"}},
                        "resources": {"limits": {"memory": "1"}},
                    }
                }
            }
        }
    }
    assert unkept_write(write, answer) is None
    # A server that did not restore the value is still caught, at the right index.
    answer["spec"]["template"]["containers"][0]["env"][0]["value"] = "--other"
    unkept = unkept_write(write, answer)
    assert unkept is not None and unkept.paths == ("spec.template.containers[0].env[0].value",)


def test_an_insert_before_a_set_item_moves_it_up() -> None:
    ops = [
        {"op": "replace", "path": "/spec/items/0/value", "value": "x"},
        {"op": "add", "path": "/spec/items/0", "value": {"name": "new"}},
        {"op": "replace", "path": "/spec/other", "value": 1},
        {"op": "remove", "path": "/spec/other"},
    ]
    write = DesiredWrite("Patch", "v1", "ConfigMap", "c", "llm", {"jsonPatch": ops}, "")
    assert expected_fields(write) == {
        "spec": {"items": {"0": {"name": "new"}, "1": {"value": "x"}}}
    }
