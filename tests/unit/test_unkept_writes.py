"""Writes the API server does not keep (a schema prunes or changes them): found from its
answer, named by path, and held back until the object changes, so kvtier never loops."""

from __future__ import annotations

import copy
from typing import Any

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
