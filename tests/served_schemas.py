"""The schema the API server serves for a kind (its OpenAPI v3 component), from the real CRDs
hack/localcluster/upstream-crds fetches (KServe's full or minimal variant), for unit tests of
code that reads `Facts.target_schemas`.

The API server publishes each CRD version's openAPIV3Schema as one component of the group
version's document, tagged with x-kubernetes-group-version-kind; the merge extensions
(x-kubernetes-list-type, -map-type, -preserve-unknown-fields) pass through as written.
tests/e2e/test_served_schema.py checks that against a real API server's document.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from kvtier.render.served_schema import kind_schema
from localcluster import upstream_crds

_FILES = {
    "InferenceService": "serving.kserve.io_inferenceservices.yaml",
    "LLMInferenceService": "serving.kserve.io_llminferenceservices.yaml",
}


@cache
def _crds(path: Path) -> tuple[dict[str, Any], ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the files are megabytes
    docs = yaml.load_all(path.read_text(), Loader=loader)
    return tuple(d for d in docs if d and d.get("kind") == "CustomResourceDefinition")


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


@cache
def _served(api_version: str, kind: str, variant: str) -> dict[str, Any]:
    found = kind_schema(document(upstream_crds(variant) / _FILES[kind]), api_version, kind)
    if found is None:
        raise KeyError(f"KServe's {variant} CRDs serve no {kind} at {api_version}")
    return found


def served_schema(api_version: str, kind: str, variant: str = "full") -> dict[str, Any]:
    """The schema of `kind` at `api_version` as served with KServe's `variant` CRDs."""
    return _served(api_version, kind, variant)


def schemas_for(target: dict[str, Any] | None, variant: str = "full") -> dict[str, Any]:
    """The served schemas of every version of a target object's kind, by apiVersion, as
    Facts.target_schemas holds them ({} for None)."""
    if target is None:
        return {}
    kind = str(target["kind"])
    out: dict[str, Any] = {}
    for crd in _crds(upstream_crds(variant) / _FILES[kind]):
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            api_version = f"{group}/{version['name']}"
            out[api_version] = served_schema(api_version, kind, variant)
    return out
