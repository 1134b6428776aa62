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


def manifest(kind: str, name: str | None = None) -> dict[str, Any]:
    docs = [d for p in (REPO / "deploy" / "manifests").glob("*.yaml") for d in load_all(p)]
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
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
    assert cluster["rules"] == manifest("ClusterRole", "kvtier-operator")["rules"]
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


# --- what OLM's own tooling needs (tests/e2e/test_packaging.py runs the tools themselves) ---

GENERATED_YAML = sorted(
    [
        *(BUNDLE / "manifests").glob("*.yaml"),
        *(BUNDLE / "metadata").glob("*.yaml"),
        *(REPO / "deploy" / "manifests").glob("*.yaml"),
        *(REPO / "deploy" / "crds").glob("*.yaml"),
        *(REPO / "charts" / "kvtier-operator" / "files" / "crds").glob("*.yaml"),
        REPO / "deploy" / "argocd" / "argocd-cm-patch.yaml",
    ]
)


def documents_as_decoders_split(text: str) -> list[str]:
    """The documents of a YAML stream split the way apimachinery's YAMLReader (which
    operator-registry and operator-sdk use) splits them: at lines that are exactly `---`."""
    docs: list[str] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.rstrip("\n").rstrip() == "---":
            docs.append("".join(current))
            current = []
        else:
            current.append(line)
    docs.append("".join(current))
    return docs


@pytest.mark.parametrize("path", GENERATED_YAML, ids=lambda p: str(p.relative_to(REPO)))
def test_generated_files_have_no_empty_document(path: Path) -> None:
    """A comment before a leading `---` makes an empty first document, and OLM's decoder
    then skips the whole file ("no bundle objects found")."""
    for i, doc in enumerate(documents_as_decoders_split(path.read_text())):
        assert yaml.safe_load(doc), f"document {i} of {path.name} is empty"


def test_every_cr_lists_its_resources_with_names(csv: dict[str, Any]) -> None:
    for owned in csv["spec"]["customresourcedefinitions"]["owned"]:
        assert owned["resources"], owned["kind"]
        for r in owned["resources"]:
            assert set(r) == {"kind", "name", "version"}, r
            # OLM: the plural of a custom resource, empty for a built-in kind
            assert r["name"] == ("cephfilesystems" if r["kind"] == "CephFilesystem" else "")


def test_descriptors_are_ones_the_console_renders(csv: dict[str, Any]) -> None:
    crds = {
        d["metadata"]["name"]: d
        for p in (REPO / "deploy" / "crds").glob("*.yaml")
        for d in load_all(p)
    }
    spec_only = "urn:alm:descriptor:com.tectonic.ui:"
    for owned in csv["spec"]["customresourcedefinitions"]["owned"]:
        crd = crds[owned["name"]]
        version = next(v for v in crd["spec"]["versions"] if v["storage"])
        top = set(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
        assert top <= {d["path"] for d in owned["specDescriptors"]}, owned["kind"]
        for d in owned["statusDescriptors"]:
            for x in d["x-descriptors"]:
                assert not x.startswith(spec_only), (owned["kind"], d["path"], x)
        for d in owned["specDescriptors"]:
            assert d["description"], d["path"]


def test_openshift_feature_annotations_and_labels(csv: dict[str, Any]) -> None:
    meta = csv["metadata"]
    features = {
        k.removeprefix("features.operators.openshift.io/"): v
        for k, v in meta["annotations"].items()
        if k.startswith("features.operators.openshift.io/")
    }
    assert set(features) == {
        "disconnected",
        "fips-compliant",
        "proxy-aware",
        "tls-profiles",
        "token-auth-aws",
        "token-auth-azure",
        "token-auth-gcp",
        "cnf",
        "cni",
        "csi",
    }
    assert set(features.values()) <= {"true", "false"}
    image = meta["annotations"]["containerImage"]
    # disconnected mirroring needs digests: only a digest-pinned bundle claims it
    assert features["disconnected"] == ("true" if "@sha256:" in image else "false")
    assert meta["labels"]["operatorframework.io/os.linux"] == "supported"
    assert meta["labels"]["operatorframework.io/arch.amd64"] == "supported"


def test_icon_is_the_chart_svg(csv: dict[str, Any]) -> None:
    import base64

    (icon,) = csv["spec"]["icon"]
    assert icon["mediatype"] == "image/svg+xml"
    svg = base64.b64decode(icon["base64data"])
    assert svg == (REPO / "charts" / "kvtier-operator" / "files" / "icon.svg").read_bytes()
    assert svg.lstrip().startswith(b"<svg")


def test_images_are_related_images(csv: dict[str, Any]) -> None:
    (deployment,) = csv["spec"]["install"]["spec"]["deployments"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["RELATED_IMAGE_KVTIER_OPERATOR"]["value"] == container["image"]
    assert env["KVTIER_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "KVTIER_IMAGE" not in env
    related = {r["image"] for r in csv["spec"]["relatedImages"]}
    assert container["image"] in related


def test_channels_and_rbac(csv: dict[str, Any]) -> None:
    ann = yaml.safe_load((BUNDLE / "metadata" / "annotations.yaml").read_text())["annotations"]
    channels = ann["operators.operatorframework.io.bundle.channels.v1"].split(",")
    assert set(channels) <= {"stable", "candidate", "fast"}
    rules = csv["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"]
    # kvtier records core/v1 Events only (kvtier.render.event)
    assert not [r for r in rules if "events.k8s.io" in r["apiGroups"]]
    assert [r for r in rules if r["apiGroups"] == [""] and "events" in r["resources"]]


def test_the_built_in_probe_image_is_the_charts_default() -> None:
    """Without its pod or env the operator runs probe Jobs with the chart's default image."""
    from kvtier.policy.contract import DEFAULT_PROBE_IMAGE

    chart = REPO / "charts" / "kvtier-operator"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    assert not values["image"]["tag"] and not values["image"]["digest"]
    assert f"{values['image']['repository']}:{app_version}" == DEFAULT_PROBE_IMAGE
