"""The admission corpus (tests/e2e/bad_inputs.yaml) agrees with the models and the CRDs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from kvtier.api import KVCachePolicy, KVCacheTier
from kvtier.generate import crd_documents
from kvtier.render.result import RenderError
from kvtier.targets.registry import kind_named

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "e2e" / "bad_inputs.yaml"
ENTRIES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())
MODELS: dict[str, type[BaseModel]] = {"KVCacheTier": KVCacheTier, "KVCachePolicy": KVCachePolicy}
SCHEMAS = {
    kind: doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for kind, doc in crd_documents().items()
}


def _cel_messages(node: dict[str, Any]) -> list[str]:
    messages = [r["message"] for r in node.get("x-kubernetes-validations", [])]
    for child in node.get("properties", {}).values():
        messages += _cel_messages(child)
    if "items" in node:
        messages += _cel_messages(node["items"])
    return messages


def _object(entry: dict[str, Any]) -> dict[str, Any]:
    default_meta = (
        {"name": "bad", "namespace": "test"}
        if entry["kind"] == "KVCacheTier"
        else {"name": "cluster"}
    )
    return {
        "apiVersion": "kvcache.io/v1alpha1",
        "kind": entry["kind"],
        "metadata": entry.get("metadata", default_meta),
        "spec": entry["object"],
    }


def test_corpus_is_large_and_well_formed() -> None:
    assert len(ENTRIES) >= 20
    names = [e["name"] for e in ENTRIES]
    assert len(names) == len(set(names))
    for entry in ENTRIES:
        assert set(entry) <= {
            "name",
            "kind",
            "via",
            "model",
            "metadata",
            "object",
            "expectMessage",
        }
        assert entry.get("model", "rejects") in {"rejects", "admits"}
        assert entry["kind"] in MODELS and entry["via"] in {"schema", "cel"}
        assert "spec." in entry["expectMessage"] or "KVCachePolicy" in entry["expectMessage"]


REJECTED = [e for e in ENTRIES if e.get("model", "rejects") == "rejects"]
ADMITTED = [e for e in ENTRIES if e.get("model") == "admits"]


@pytest.mark.parametrize("entry", REJECTED, ids=[e["name"] for e in REJECTED])
def test_models_reject_every_bad_input(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MODELS[entry["kind"]].model_validate(_object(entry))


@pytest.mark.parametrize("entry", ADMITTED, ids=[e["name"] for e in ADMITTED])
def test_what_the_models_admit_the_target_registry_refuses(entry: dict[str, Any]) -> None:
    tier = KVCacheTier.model_validate(_object(entry))
    with pytest.raises(RenderError) as refused:
        kind_named(tier.spec.target_ref.kind)
    assert refused.value.reason == "UnsupportedTarget"
    kinds = SCHEMAS["KVCacheTier"]["properties"]["spec"]["properties"]["targetRef"]
    assert tier.spec.target_ref.kind not in kinds["properties"]["kind"]["enum"]


CEL = [e for e in ENTRIES if e["via"] == "cel"]
SCHEMA = [e for e in ENTRIES if e["via"] == "schema"]


@pytest.mark.parametrize("entry", CEL, ids=[e["name"] for e in CEL])
def test_cel_expectations_match_a_crd_message(entry: dict[str, Any]) -> None:
    messages = _cel_messages(SCHEMAS[entry["kind"]])
    assert any(entry["expectMessage"] in m for m in messages), entry["expectMessage"]


@pytest.mark.parametrize("entry", SCHEMA, ids=[e["name"] for e in SCHEMA])
def test_schema_expectations_name_a_field_of_the_crd(entry: dict[str, Any]) -> None:
    path, _, _ = entry["expectMessage"].partition(":")
    node = SCHEMAS[entry["kind"]]
    for part in path.split("."):
        name = re.sub(r"\[\d+\]$", "", part)
        node = node["properties"][name]
        if name != part:
            node = node["items"]
