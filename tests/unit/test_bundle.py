"""Structural check of the OLM bundle: it agrees with the rendered chart and the CRDs it was
generated from (hack/render-manifests --check catches drift; this checks the shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.api.policy import KVCachePolicy
from kvtier.api.tier import KVCacheTier

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundle"
CSV_PATH = BUNDLE / "manifests" / "kvtier-operator.clusterserviceversion.yaml"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifest(kind: str) -> dict[str, Any]:
    docs = [d for p in (REPO / "deploy" / "manifests").glob("*.yaml") for d in load_all(p)]
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def csv() -> dict[str, Any]:
    (doc,) = load_all(CSV_PATH)
    return doc


def schema_has(schema: dict[str, Any], path: str) -> bool:
    for part in path.split("."):
        schema = (schema.get("properties") or {}).get(part)  # type: ignore[assignment]
        if schema is None:
            return False
    return True


def test_annotations_name_the_package_and_channels() -> None:
    ann = yaml.safe_load((BUNDLE / "metadata" / "annotations.yaml").read_text())["annotations"]
    assert ann["operators.operatorframework.io.bundle.mediatype.v1"] == "registry+v1"
    assert ann["operators.operatorframework.io.bundle.manifests.v1"] == "manifests/"
    assert ann["operators.operatorframework.io.bundle.metadata.v1"] == "metadata/"
    default = ann["operators.operatorframework.io.bundle.channel.default.v1"]
    assert default in ann["operators.operatorframework.io.bundle.channels.v1"].split(",")
    labels = (BUNDLE / "Containerfile").read_text()
    for key, value in ann.items():
        assert f'LABEL {key}="{value}"' in labels


def test_csv_identity(csv: dict[str, Any]) -> None:
    assert csv["apiVersion"] == "operators.coreos.com/v1alpha1"
    assert csv["kind"] == "ClusterServiceVersion"
    version = yaml.safe_load((REPO / "charts" / "kvtier-operator" / "Chart.yaml").read_text())[
        "appVersion"
    ]
    assert csv["spec"]["version"] == version
    assert csv["metadata"]["name"] == f"kvtier-operator.v{version}"
    modes = {m["type"]: m["supported"] for m in csv["spec"]["installModes"]}
    assert modes == {
        "OwnNamespace": False,
        "SingleNamespace": False,
        "MultiNamespace": False,
        "AllNamespaces": True,
    }


def test_owned_crds_are_the_generated_ones(csv: dict[str, Any]) -> None:
    owned = {c["name"]: c for c in csv["spec"]["customresourcedefinitions"]["owned"]}
    shipped = {
        d["metadata"]["name"]: d
        for p in (BUNDLE / "manifests").glob("*.yaml")
        for d in load_all(p)
        if d["kind"] == "CustomResourceDefinition"
    }
    generated = {
        d["metadata"]["name"]: d
        for p in (REPO / "deploy" / "crds").glob("*.yaml")
        for d in load_all(p)
    }
    assert set(owned) == set(shipped) == set(generated)
    for name, crd in shipped.items():
        assert crd == generated[name]
        version = next(v for v in crd["spec"]["versions"] if v["storage"])
        root = version["schema"]["openAPIV3Schema"]["properties"]
        entry = owned[name]
        assert (entry["kind"], entry["version"]) == (crd["spec"]["names"]["kind"], version["name"])
        for d in entry["specDescriptors"]:
            assert schema_has(root["spec"], d["path"]), d["path"]
        for d in entry["statusDescriptors"]:
            assert schema_has(root["status"], d["path"]), d["path"]
        conditions = [d for d in entry["statusDescriptors"] if d["path"] == "conditions"]
        assert conditions[0]["x-descriptors"] == ["urn:alm:descriptor:io.kubernetes.conditions"]


def test_install_strategy_is_the_rendered_chart(csv: dict[str, Any]) -> None:
    install = csv["spec"]["install"]
    assert install["strategy"] == "deployment"
    spec = install["spec"]
    (cluster,) = spec["clusterPermissions"]
    (ns,) = spec["permissions"]
    sa = manifest("ServiceAccount")["metadata"]["name"]
    assert cluster["serviceAccountName"] == ns["serviceAccountName"] == sa
    assert cluster["rules"] == manifest("ClusterRole")["rules"]
    assert ns["rules"] == manifest("Role")["rules"]
    granted = {r for rule in cluster["rules"] + ns["rules"] for r in rule["resources"]}
    assert "secrets" not in granted
    (deployment,) = spec["deployments"]
    assert deployment["spec"] == manifest("Deployment")["spec"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa
    image = pod["containers"][0]["image"]
    assert csv["metadata"]["annotations"]["containerImage"] == image
    assert {"name": "kvtier-operator", "image": image} in csv["spec"]["relatedImages"]


def test_alm_examples_are_valid_objects(csv: dict[str, Any]) -> None:
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    assert {e["kind"] for e in examples} == {"KVCacheTier", "KVCachePolicy"}
    for e in examples:
        if e["kind"] == "KVCacheTier":
            KVCacheTier.model_validate(e)
        else:
            KVCachePolicy.model_validate(e)
