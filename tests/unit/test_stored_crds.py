"""The capture of the upstream CRDs' stored form (hack/localcluster/stored_crds.py): what
its key depends on, and what a cached file must hold to be used."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

import stored_crds
from stored_crds import Served, Stored


def _crd_files(root: Path, **files: str) -> Path:
    directory = root / "crds" / "full"
    directory.mkdir(parents=True)
    for name, text in files.items():
        (directory / f"{name}.yaml").write_text(text)
    return directory


def _stored_value(crd: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(crd).encode()).decode()


def _crd(name: str, established: bool = True, **spec: Any) -> dict[str, Any]:
    status = "True" if established else "False"
    return {
        "kind": "CustomResourceDefinition",
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"conditions": [{"type": "Established", "status": status}]},
    }


def test_the_key_changes_with_any_file_or_the_api_servers_version(tmp_path: Path) -> None:
    directory = _crd_files(tmp_path, a="kind: A\n", b="kind: B\n")
    files = stored_crds.crd_files(directory)
    key = stored_crds.capture_key(files, "Kubernetes v1.36.3")
    assert key == stored_crds.capture_key(list(reversed(files)), "Kubernetes v1.36.3")
    assert key != stored_crds.capture_key(files, "Kubernetes v1.36.4")
    (directory / "b.yaml").write_text("kind: B2\n")
    assert key != stored_crds.capture_key(files, "Kubernetes v1.36.3")
    (directory / "b.yaml").rename(directory / "c.yaml")
    assert key != stored_crds.capture_key(stored_crds.crd_files(directory), "Kubernetes v1.36.3")


def test_a_capture_is_used_only_for_the_files_and_version_it_was_made_of(
    tmp_path: Path,
) -> None:
    directory = _crd_files(tmp_path, a="kind: A\n")
    stored = Stored((("/registry/x", _stored_value(_crd("x"))),))
    assert stored_crds.load(directory, "v1") is None  # nothing cached yet
    path = stored_crds.save(directory, "v1", stored)
    assert path.parent == tmp_path / "crds" / "stored"
    assert stored_crds.load(directory, "v1") == stored
    assert stored_crds.load(directory, "v2") is None
    (directory / "a.yaml").write_text("kind: A2\n")
    assert stored_crds.load(directory, "v1") is None


@pytest.mark.parametrize(
    "content",
    ["", "{", json.dumps({"layout": 0, "objects": [["k", "v"]]}), json.dumps({"layout": 1})],
)
def test_a_damaged_or_foreign_cache_file_is_not_used(tmp_path: Path, content: str) -> None:
    directory = _crd_files(tmp_path, a="kind: A\n")
    key = stored_crds.capture_key(stored_crds.crd_files(directory), "v1")
    path = stored_crds.cache_file(directory, key)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert stored_crds.load(directory, "v1") is None


def test_the_resources_a_capture_serves_are_its_served_versions() -> None:
    isvc = _crd(
        "inferenceservices.serving.kserve.io",
        group="serving.kserve.io",
        names={"plural": "inferenceservices"},
        versions=[{"name": "v1beta1", "served": True}, {"name": "v1alpha1", "served": False}],
    )
    old_style = _crd(
        "pools.example.io", group="example.io", names={"plural": "pools"}, version="v1"
    )
    stored = Stored((("k1", _stored_value(isvc)), ("k2", _stored_value(old_style))))
    assert stored.served() == [
        Served("serving.kserve.io", "v1beta1", "inferenceservices"),
        Served("example.io", "v1", "pools"),
    ]


def test_a_capture_names_the_crds_not_established() -> None:
    stored = Stored(
        (
            ("k1", _stored_value(_crd("a.example.io"))),
            ("k2", _stored_value(_crd("b.example.io", False))),
        )
    )
    assert stored.not_established() == ["b.example.io"]


ISVC = Served("serving.kserve.io", "v1beta1", "inferenceservices")
ROUTE = Served("serving.kserve.io", "v1beta1", "inferencegraphs")


def _api(discovery: list[str] | None, paths: list[str] | None) -> Any:
    """A getter over an API server whose v1beta1 discovery lists `discovery` and whose
    OpenAPI v3 document of it has `paths` (None: not there)."""

    def get(path: str) -> dict[str, Any] | None:
        if path == "/apis/serving.kserve.io/v1beta1" and discovery is not None:
            return {"resources": [{"name": n} for n in discovery]}
        if path == "/openapi/v3/apis/serving.kserve.io/v1beta1" and paths is not None:
            return {"paths": {p: {} for p in paths}}
        return None

    return get


def test_a_resource_is_served_once_discovery_lists_it_and_openapi_describes_it() -> None:
    both = [ISVC, ROUTE]
    namespaced = "/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/"
    assert stored_crds.unserved(both, _api(None, None)) == both
    # Discovery lists both before the OpenAPI controller has published either.
    assert stored_crds.unserved(both, _api(["inferenceservices", "inferencegraphs"], None)) == both
    # The group version is in the index with its first CRD; the other is not described yet.
    first = [namespaced + "inferenceservices", namespaced + "inferenceservices/{name}/status"]
    listed = ["inferenceservices", "inferencegraphs"]
    assert stored_crds.unserved(both, _api(listed, first)) == [ROUTE]
    everything = [*first, namespaced + "inferencegraphs/{name}"]
    assert stored_crds.unserved(both, _api(listed, everything)) == []
    # Described but not (any longer) listed by discovery is not served either.
    assert stored_crds.unserved(both, _api(["inferencegraphs"], everything)) == [ISVC]
