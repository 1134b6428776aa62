"""The schema the API server serves for a kind (its OpenAPI v3 component), from the real CRDs
hack/localcluster/upstream-crds fetches (KServe's full or minimal variant), for unit tests of
code that reads `Facts.target_schemas`.

The API server publishes each CRD version's openAPIV3Schema as one component of the group
version's document, tagged with x-kubernetes-group-version-kind; the merge extensions
(x-kubernetes-list-type, -map-type, -preserve-unknown-fields) pass through as written.
tests/e2e/test_served_schema.py checks that against a real API server's document.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from crd_documents import documents
from kvtier.render.served_schema import kind_schema
from localcluster import upstream_crds

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "localcluster" / "build"
_FILES = {
    "InferenceService": "serving.kserve.io_inferenceservices.yaml",
    "LLMInferenceService": "serving.kserve.io_llminferenceservices.yaml",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io_leaderworkersets.yaml",  # LWS's own CRD
}


@cache
def _crds(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in documents(path) if d.get("kind") == "CustomResourceDefinition")


def document(path: Path) -> dict[str, Any]:
    """The components of the group-version documents a CRD file's kinds appear in."""
    schemas: dict[str, Any] = {}
    for crd in _crds(path):
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = dict(version["schema"]["openAPIV3Schema"])
            schema["x-kubernetes-group-version-kind"] = [
                {"group": group, "version": version["name"], "kind": kind}
            ]
            schemas[f"{group}.{version['name']}.{kind}"] = schema
    return {"components": {"schemas": schemas}}


def kind_document(api_version: str, kind: str, variant: str = "full") -> dict[str, Any]:
    """The document the API server serves `kind` at `api_version` in: from KServe's
    `variant` CRDs or LWS's, or Kubernetes' own for a built-in kind."""
    if kind not in _FILES:
        return kubernetes_document(api_version)
    return document(upstream_crds(variant) / _FILES[kind])


@cache
def _served(api_version: str, kind: str, variant: str) -> dict[str, Any]:
    found = kind_schema(kind_document(api_version, kind, variant), api_version, kind)
    if found is None:
        raise KeyError(f"the {variant} CRDs serve no {kind} at {api_version}")
    return found


@cache
def kubernetes_document(group_version: str) -> dict[str, Any]:
    """A built-in group version's OpenAPI v3 document as the pinned kube-apiserver serves it:
    the file k8s.io/kubernetes publishes in its module (api/openapi-spec/v3), at the version
    hack/localcluster/build builds the control plane from."""
    pinned = re.search(r'K8S_VERSION="\$\{K8S_VERSION:-(v[0-9.]+)\}"', BUILD_SCRIPT.read_text())
    assert pinned, "hack/localcluster/build pins no K8S_VERSION"
    version = os.environ.get("K8S_VERSION", pinned.group(1))
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
        cwd=BUILD_SCRIPT.parent,
    )
    directory = Path(json.loads(found.stdout)["Dir"]) / "api" / "openapi-spec" / "v3"
    name = f"apis__{group_version.replace('/', '__')}_openapi.json"
    loaded: dict[str, Any] = json.loads((directory / name).read_text())
    return loaded


def served_schema(api_version: str, kind: str, variant: str = "full") -> dict[str, Any]:
    """The schema of `kind` at `api_version` as served with KServe's `variant` CRDs (a
    built-in kind: as Kubernetes serves it)."""
    if kind not in _FILES:
        found = kind_schema(kubernetes_document(api_version), api_version, kind)
        if found is None:
            raise KeyError(f"Kubernetes serves no {kind} at {api_version}")
        return found
    return _served(api_version, kind, variant)


def schemas_for(target: dict[str, Any] | None, variant: str = "full") -> dict[str, Any]:
    """The served schemas of every version of a target object's kind, by apiVersion, as
    Facts.target_schemas holds them ({} for None)."""
    if target is None:
        return {}
    kind = str(target["kind"])
    if kind not in _FILES:  # a built-in kind
        api_version = str(target["apiVersion"])
        return {api_version: served_schema(api_version, kind)}
    out: dict[str, Any] = {}
    for crd in _crds(upstream_crds(variant) / _FILES[kind]):
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            api_version = f"{group}/{version['name']}"
            out[api_version] = served_schema(api_version, kind, variant)
    return out
