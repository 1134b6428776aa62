"""The real CRDs the e2e tests, the demo and the benchmark install: fetched by
hack/localcluster/upstream-crds from KServe's and Rook's Go modules at pinned versions (quick
once cached), and the facts of their schemas that kvtier's writes depend on. A failed fetch
fails these tests; it never skips them."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from crd_documents import documents
from localcluster import CRDS_SCRIPT, upstream_crds

PINS = {"KSERVE_VERSION": "v0.20.0", "ROOK_VERSION": "v1.18.11", "LWS_VERSION": "v0.8.0"}
KSERVE = "serving.kserve.io"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the tree holds megabytes of YAML


@pytest.fixture(scope="module")
def full() -> Path:
    return upstream_crds("full")


@pytest.fixture(scope="module")
def minimal() -> Path:
    return upstream_crds("minimal")


@cache
def _docs(path: Path) -> dict[str, dict[str, Any]]:
    docs = documents(path)
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


def _crd(directory: Path, file: str, name: str) -> dict[str, Any]:
    return _docs(directory / file)[name]


def _schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
            return schema
    raise AssertionError(f"{crd['metadata']['name']} has no version {version}")


def _at(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    for key in path:
        schema = schema["items"] if key == "[]" else schema["properties"][key]
    return schema


def _isvc(directory: Path) -> dict[str, Any]:
    return _crd(directory, f"{KSERVE}_inferenceservices.yaml", f"inferenceservices.{KSERVE}")


def _llmisvc(directory: Path) -> dict[str, Any]:
    return _crd(directory, f"{KSERVE}_llminferenceservices.yaml", f"llminferenceservices.{KSERVE}")


def _assert_map(node: dict[str, Any], keys: list[str]) -> None:
    assert node["type"] == "array"
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == keys


def _assert_atomic_list(node: dict[str, Any]) -> None:
    # No list type means atomic: an apply owns the whole list, never an item of it.
    assert node["type"] == "array"
    assert node.get("x-kubernetes-list-type", "atomic") == "atomic"


def _assert_untyped_object(node: dict[str, Any]) -> None:
    # An object without properties that does not preserve unknown fields: every field
    # written into it is pruned.
    assert node["type"] == "object"
    assert "properties" not in node
    assert "x-kubernetes-preserve-unknown-fields" not in node


def _assert_container(node: dict[str, Any]) -> None:
    _assert_atomic_list(_at(node, "args"))
    _assert_map(_at(node, "env"), ["name"])
    _assert_map(_at(node, "volumeMounts"), ["mountPath"])


def test_the_script_pins_every_version_and_stamps_the_cache(full: Path, minimal: Path) -> None:
    script = CRDS_SCRIPT.read_text()
    for var, version in PINS.items():
        assert re.search(rf'^{var}="\$\{{{var}:-{re.escape(version)}\}}"$', script, re.M), var
    stamp = f"kserve={PINS['KSERVE_VERSION']} rook={PINS['ROOK_VERSION']} lws={PINS['LWS_VERSION']}"
    for directory in (full, minimal):
        assert (directory / ".version").read_text().strip() == stamp
        sources = (directory / "SOURCES").read_text()
        assert f"github.com/kserve/kserve@{PINS['KSERVE_VERSION']}" in sources
        assert f"github.com/rook/rook@{PINS['ROOK_VERSION']}" in sources
        assert f"sigs.k8s.io/lws@{PINS['LWS_VERSION']}" in sources
    assert full.parent == minimal.parent
    assert not full.is_relative_to(CRDS_SCRIPT.parents[2])  # a cache outside the repository


def test_inference_service_full(full: Path) -> None:
    crd = _isvc(full)
    assert crd["spec"]["names"]["kind"] == "InferenceService"
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    schema = _schema(crd, "v1beta1")
    assert _at(schema, "spec")["required"] == ["predictor"]
    predictor = _at(schema, "spec", "predictor")
    _assert_container(_at(predictor, "model"))
    assert _at(predictor, "minReplicas")["type"] == "integer"
    assert _at(predictor, "maxReplicas")["type"] == "integer"
    # predictor.volumes and predictor.containers are atomic lists: a server-side apply that
    # forces them takes the whole list from the user.
    _assert_atomic_list(_at(predictor, "volumes"))
    _assert_atomic_list(_at(predictor, "containers"))
    assert _at(predictor, "volumes", "[]")["required"] == ["name"]
    # Labels on an ephemeral volume's claim template are pruned.
    template = _at(predictor, "volumes", "[]", "ephemeral", "volumeClaimTemplate")
    assert template["required"] == ["spec"]
    _assert_untyped_object(_at(template, "metadata"))


def test_inference_service_minimal(minimal: Path) -> None:
    spec = _at(_schema(_isvc(minimal), "v1beta1"), "spec")
    assert spec["x-kubernetes-map-type"] == "atomic"
    assert spec["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in spec


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2"])
def test_llm_inference_service_full(full: Path, version: str) -> None:
    crd = _llmisvc(full)
    assert crd["spec"]["names"]["kind"] == "LLMInferenceService"
    # The CRD itself, not the kustomization's conversion-webhook patch: no conversion.
    assert crd["spec"].get("conversion", {"strategy": "None"}) == {"strategy": "None"}
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert set(versions) == {"v1alpha1", "v1alpha2"}
    assert versions[version]["served"] is True
    assert [n for n, v in versions.items() if v["storage"]] == ["v1alpha2"]
    schema = _schema(crd, version)
    assert _at(schema, "spec", "model")["required"] == ["uri"]
    assert _at(schema, "spec", "parallelism", "tensor")["type"] == "integer"
    template = _at(schema, "spec", "template")
    _assert_map(_at(template, "containers"), ["name"])
    assert _at(template, "containers", "[]")["required"] == ["name"]
    _assert_container(_at(template, "containers", "[]"))
    _assert_map(_at(template, "volumes"), ["name"])
    claim = _at(template, "volumes", "[]", "ephemeral", "volumeClaimTemplate")
    _assert_untyped_object(_at(claim, "metadata"))


def test_only_v1alpha2_has_native_offloading(full: Path) -> None:
    crd = _llmisvc(full)
    native = _at(_schema(crd, "v1alpha2"), "spec", "kvCacheOffloading")
    assert set(native["properties"]) == {"cpu", "evictionPolicy", "secondary"}
    assert native["properties"]["evictionPolicy"]["enum"] == ["lru", "arc"]
    # v1alpha1 has no such field: a kvCacheOffloading written there is pruned.
    assert "kvCacheOffloading" not in _at(_schema(crd, "v1alpha1"), "spec")["properties"]


def test_llm_inference_service_minimal(minimal: Path) -> None:
    crd = _llmisvc(minimal)
    v1alpha1 = _at(_schema(crd, "v1alpha1"), "spec")
    assert v1alpha1["x-kubernetes-map-type"] == "atomic"
    assert v1alpha1["x-kubernetes-preserve-unknown-fields"] is True
    template = _at(_schema(crd, "v1alpha2"), "spec", "template")
    _assert_map(_at(template, "containers"), ["name"])


@pytest.mark.parametrize("variant", ["full", "minimal"])
def test_rook_ceph_filesystem(variant: str, full: Path, minimal: Path) -> None:
    directory = {"full": full, "minimal": minimal}[variant]
    crds = _docs(directory / "ceph.rook.io_crds.yaml")
    crd = crds["cephfilesystems.ceph.rook.io"]
    assert [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [
        ("v1", True, True)
    ]
    spec = _at(_schema(crd, "v1"), "spec")
    assert set(spec["required"]) == {"dataPools", "metadataPool", "metadataServer"}
    _assert_atomic_list(_at(spec, "dataPools"))
    assert _at(spec, "dataPools", "[]", "replicated")["required"] == ["size"]


def test_the_repository_holds_no_crd_of_a_foreign_kind() -> None:
    # No stand-in for anything a module serves: every CRD in the tree is kvtier's own.
    repo = CRDS_SCRIPT.parents[2]
    tracked = subprocess.run(
        ["git", "ls-files", "*.yaml", "*.yml"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked
    foreign = []
    for name in tracked:
        path = repo / name
        if not path.exists() or "CustomResourceDefinition" not in path.read_text():
            continue
        for doc in yaml.load_all(path.read_text(), Loader=LOADER):
            crd = isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
            if crd and doc["spec"]["group"] != "kvcache.io":
                foreign.append(f"{name}: {doc['metadata']['name']}")
    assert not foreign, foreign
