"""The stand-in CRDs of foreign kinds: names right, list semantics as on a real cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

CRDS = Path(__file__).resolve().parents[2] / "hack" / "crds"
POD_LISTS = {
    "env": ["name"],
    "volumeMounts": ["mountPath"],
}


def _crd(file: str) -> dict[str, Any]:
    text = (CRDS / file).read_text()
    assert text.startswith("# Test stand-in written by the kvtier project")
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def _schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
            return schema
    raise AssertionError(version)


def _at(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    for key in path:
        schema = schema["items"] if key == "[]" else schema["properties"][key]
    return schema


def _assert_map(node: dict[str, Any], keys: list[str]) -> None:
    assert node["type"] == "array"
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == keys
    assert set(keys) <= set(node["items"]["required"])  # map keys must be required


def _assert_container(node: dict[str, Any]) -> None:
    assert node["x-kubernetes-preserve-unknown-fields"] is True
    assert node["properties"]["args"]["x-kubernetes-list-type"] == "atomic"
    for field, keys in POD_LISTS.items():
        _assert_map(node["properties"][field], keys)


def _assert_common(crd: dict[str, Any], group: str, kind: str, plural: str) -> None:
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    assert crd["spec"]["group"] == group
    assert crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (kind, plural, kind.lower())
    for version in crd["spec"]["versions"]:
        assert version["served"] is True
        assert version["subresources"] == {"status": {}}
        schema = version["schema"]["openAPIV3Schema"]
        assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
        assert schema["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert sum(v["storage"] for v in crd["spec"]["versions"]) == 1


def test_inference_service() -> None:
    crd = _crd("serving.kserve.io_inferenceservices.yaml")
    _assert_common(crd, "serving.kserve.io", "InferenceService", "inferenceservices")
    schema = _schema(crd, "v1beta1")
    _assert_container(_at(schema, "spec", "predictor", "model"))
    _assert_map(_at(schema, "spec", "predictor", "volumes"), ["name"])
    containers = _at(schema, "spec", "predictor", "containers")
    _assert_map(containers, ["name"])
    _assert_container(containers["items"])


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2"])
def test_llm_inference_service(version: str) -> None:
    crd = _crd("serving.kserve.io_llminferenceservices.yaml")
    _assert_common(crd, "serving.kserve.io", "LLMInferenceService", "llminferenceservices")
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    storage = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
    assert storage == ["v1alpha2"]
    schema = _schema(crd, version)
    containers = _at(schema, "spec", "template", "containers")
    _assert_map(containers, ["name"])
    _assert_container(containers["items"])
    _assert_map(_at(schema, "spec", "template", "volumes"), ["name"])


def test_only_v1alpha2_has_native_offloading() -> None:
    crd = _crd("serving.kserve.io_llminferenceservices.yaml")
    native = _at(_schema(crd, "v1alpha2"), "spec", "kvCacheOffloading")
    assert set(native["properties"]) == {"cpu", "evictionPolicy", "secondary"}
    v1alpha1_spec = _at(_schema(crd, "v1alpha1"), "spec")
    rules = [r["rule"] for r in v1alpha1_spec["x-kubernetes-validations"]]
    assert rules == ["!has(self.kvCacheOffloading)"]


def test_ceph_filesystem() -> None:
    crd = _crd("ceph.rook.io_cephfilesystems.yaml")
    _assert_common(crd, "ceph.rook.io", "CephFilesystem", "cephfilesystems")
    _assert_map(_at(_schema(crd, "v1"), "spec", "dataPools"), ["name"])
