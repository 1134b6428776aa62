"""The packaging as the ecosystem's own tools see it (docs/packaging.md).

Built from their Go modules at pinned versions by hack/validators/build (into the same cache
as the control plane): operator-sdk's `bundle validate` suites and its static scorecard
tests, operator-registry's `opm render` (the parser a catalog build uses), `helm lint
--strict`. Then the one image knob reaches every output, and the bundle installs for real:
its CRDs, the CSV (against OLM's own CSV CRD) and every alm-example, server-side with
fieldValidation=Strict, with nothing pruned.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import ClusterError, LocalCluster

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundle"
CHART = REPO / "charts" / "kvtier-operator"
MANIFESTS = REPO / "deploy" / "manifests"
CSV_FILE = BUNDLE / "manifests" / "kvtier-operator.clusterserviceversion.yaml"
BUILD = REPO / "hack" / "validators" / "build"


def _load_render_manifests() -> Any:
    spec = importlib.util.spec_from_file_location(
        "render_manifests", REPO / "hack" / "render_manifests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["render_manifests"] = module
    spec.loader.exec_module(module)
    return module


render_manifests = _load_render_manifests()

# Warnings a validator may still print, each explained in docs/packaging.md. Empty: any
# warning fails the test until it is fixed or explained there and listed here.
EXPLAINED_WARNINGS: list[str] = []
# The static scorecard tests (the olm and basic suites of `operator-sdk scorecard`).
SCORECARD_TESTS = [
    "basic-check-spec",
    "olm-bundle-validation",
    "olm-crds-have-validation",
    "olm-crds-have-resources",
    "olm-spec-descriptors",
    "olm-status-descriptors",
]
# Suggestions the scorecard may make, explained in docs/packaging.md.
EXPLAINED_SUGGESTIONS = {
    # alm-examples are what a user creates: they carry no status, so the test cannot match
    # status descriptors against one and says so for each CRD.
    "olm-status-descriptors": "does not have status spec",
}


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    """The validators' bin directory (built on first use, cached afterwards)."""
    out = subprocess.run(
        ["bash", str(BUILD)], check=True, capture_output=True, text=True, timeout=3600
    )
    return Path(out.stdout.strip().splitlines()[-1])


def run(*args: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    # A scratch TMPDIR per call: opm leaves an image-cache directory in it on every run.
    with tempfile.TemporaryDirectory(prefix="kvtier-tool-") as scratch:
        proc = subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
            env={**os.environ, "TMPDIR": scratch},
        )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))}: {proc.stdout}\n{proc.stderr}")
    return proc


def bundle_validate(bin_dir: Path, bundle: Path, select: str) -> dict[str, Any]:
    proc = run(
        bin_dir / "operator-sdk",
        "bundle",
        "validate",
        bundle,
        "-b",
        "none",
        "--select-optional",
        select,
        "-o",
        "json-alpha1",
    )
    start = proc.stdout.find("{")
    # A bundle it cannot load ends in a fatal log line and no result at all.
    result: dict[str, Any] = json.loads(proc.stdout[start:]) if start >= 0 else {"passed": False}
    result["returncode"] = proc.returncode
    result["stderr"] = proc.stderr
    return result


def outputs(result: dict[str, Any], kind: str) -> list[str]:
    return [o["message"] for o in result.get("outputs") or [] if o["type"] == kind]


@pytest.mark.parametrize("select", ["suite=operatorframework", "name=good-practices"])
def test_bundle_validate(bin_dir: Path, select: str) -> None:
    """operator-sdk's operatorframework suite (OperatorHub metadata, capabilities,
    categories, deprecated APIs, good practices) and good practices alone (channel names
    come from metadata/annotations.yaml): no error, no unexplained warning."""
    result = bundle_validate(bin_dir, BUNDLE, select)
    assert result["returncode"] == 0, result
    assert result["passed"] is True, result
    assert outputs(result, "error") == []
    unexplained = [
        w for w in outputs(result, "warning") if not any(e in w for e in EXPLAINED_WARNINGS)
    ]
    assert unexplained == []


def test_scorecard_static_tests(bin_dir: Path) -> None:
    proc = run(bin_dir / "kvtier-scorecard", BUNDLE, *SCORECARD_TESTS, check=True)
    statuses = json.loads(proc.stdout)
    assert sorted(statuses) == sorted(SCORECARD_TESTS)
    for name, status in statuses.items():
        for r in status["results"]:
            assert r["state"] == "pass", (name, r.get("errors"), r.get("log"))
            assert not r.get("errors"), (name, r["errors"])
            for s in r.get("suggestions") or []:
                assert EXPLAINED_SUGGESTIONS.get(name, "\0") in s, (name, s)


def test_opm_renders_the_bundle(bin_dir: Path) -> None:
    """What a file-based catalog gets from the bundle directory: the package, both APIs,
    every manifest as an olm.bundle.object, the operator image."""
    proc = run(bin_dir / "opm", "render", BUNDLE, "-o", "json", check=True)
    (bundle,) = [d for d in map(json.loads, _json_stream(proc.stdout))]
    csv = yaml.safe_load(CSV_FILE.read_text())
    assert bundle["schema"] == "olm.bundle"
    assert bundle["name"] == csv["metadata"]["name"]
    assert bundle["package"] == "kvtier-operator"
    props = bundle["properties"]
    gvks = {(p["value"]["group"], p["value"]["kind"]) for p in props if p["type"] == "olm.gvk"}
    assert gvks == {("kvcache.io", "KVCacheTier"), ("kvcache.io", "KVCachePolicy")}
    objects = [p for p in props if p["type"] == "olm.bundle.object"]
    assert len(objects) == len(list((BUNDLE / "manifests").glob("*.yaml")))
    images = {i["image"] for i in bundle["relatedImages"]}
    assert csv["metadata"]["annotations"]["containerImage"] in images


def _json_stream(text: str) -> list[str]:
    decoder, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        obj, end = decoder.raw_decode(text, i)
        out.append(json.dumps(obj))
        i = end
    return out


def test_an_unloadable_file_fails_the_validators(bin_dir: Path, tmp_path: Path) -> None:
    """The control: a comment before a leading `---` (an empty first document, how every
    generated file used to start) makes both tools lose the CSV."""
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    csv = bundle / "manifests" / CSV_FILE.name
    csv.write_text("# a comment\n---\n" + csv.read_text())
    result = bundle_validate(bin_dir, bundle, "suite=operatorframework")
    assert result["returncode"] != 0 or result["passed"] is False
    assert "unable to find a csv" in result["stderr"] + json.dumps(result)
    assert run(bin_dir / "opm", "render", bundle, "-o", "json").returncode != 0


@pytest.mark.parametrize("values", [None, CHART / "ci" / "full-values.yaml"])
def test_helm_lint_strict(values: Path | None) -> None:
    helm = render_manifests.helm_binary()
    extra = ["-f", str(values)] if values else []
    run(helm, "lint", "--strict", CHART, *extra, check=True)


# --- the one image knob ---------------------------------------------------------------------

DIGEST_REF = "registry.example:5000/team/kvtier@sha256:" + "ab" * 32
TAG_REF = "registry.example:5000/team/kvtier:1.2.3"


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _operator_container(deployment_spec: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in deployment_spec["template"]["spec"]["containers"] if c["name"] == "operator"]
    container: dict[str, Any] = c
    return container


@pytest.mark.parametrize("ref", [DIGEST_REF, TAG_REF])
def test_render_image_reaches_every_output(ref: str) -> None:
    files = render_manifests.expected_files(ref)
    seen = 0
    for path, text in files.items():
        for d in _docs(text) if path.suffix == ".yaml" else []:
            if d.get("kind") == "Deployment":
                spec = d["spec"]
            elif d.get("kind") == "ClusterServiceVersion":
                ann = d["metadata"]["annotations"]
                assert ann["containerImage"] == ref
                assert {"name": "kvtier-operator", "image": ref} in d["spec"]["relatedImages"]
                disconnected = ann["features.operators.openshift.io/disconnected"]
                assert disconnected == ("true" if "@sha256:" in ref else "false")
                (dep,) = d["spec"]["install"]["spec"]["deployments"]
                spec = dep["spec"]
            else:
                continue
            c = _operator_container(spec)
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert (c["image"], env["RELATED_IMAGE_KVTIER_OPERATOR"]) == (ref, ref), path
            seen += 1
        assert "quay.io/kvtier/kvtier-operator" not in text, path
    assert seen == 2  # deploy/manifests/operator.yaml and the CSV


@pytest.mark.parametrize(
    "ref", ["kvtier", "repo@sha256:short", "registry:5000/kvtier", "a b:1", "repo:1,x=y"]
)
def test_render_refuses_bad_image_refs(ref: str) -> None:
    with pytest.raises(render_manifests.RenderError):
        render_manifests.image_values(ref)


def test_kustomize_images_override_reaches_probe_jobs(tmp_path: Path) -> None:
    """`images:` in deploy/manifests' kustomization changes the container image and, through
    its replacement, RELATED_IMAGE_KVTIER_OPERATOR (the image probe Jobs run)."""
    kubectl = render_manifests.helm_binary().parent / "kubectl"
    if not kubectl.exists():
        subprocess.run(["bash", str(render_manifests.BUILD_SCRIPT)], check=True)
    work = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, work)
    kustomization = yaml.safe_load((work / "kustomization.yaml").read_text())
    kustomization["images"] = [
        {
            "name": "quay.io/kvtier/kvtier-operator",
            "newName": TAG_REF.rsplit(":", 1)[0],
            "newTag": "1.2.3",
        }
    ]
    (work / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    out = run(kubectl, "kustomize", work, check=True).stdout
    (deployment,) = [d for d in _docs(out) if d["kind"] == "Deployment"]
    c = _operator_container(deployment["spec"])
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert c["image"] == env["RELATED_IMAGE_KVTIER_OPERATOR"] == TAG_REF


# --- the bundle installs for real ------------------------------------------------------------


@pytest.fixture(scope="module")
def bare_cluster(bin_dir: Path) -> Iterator[LocalCluster]:
    """A control plane of its own with no CRDs: the bundle's are the ones installed, and
    the KVCachePolicy `cluster` of the alm-examples collides with no other test's."""
    workdir = Path(tempfile.mkdtemp(prefix="kvtier-bundle-"))
    local = LocalCluster(workdir)
    try:
        local.up()
        yield local
    finally:
        local.down()
        shutil.rmtree(workdir, ignore_errors=True)


def missing(sent: Any, got: Any, path: str = "") -> list[str]:
    """Paths of what was sent and is not in what the API server returned (pruned or
    changed); what the server adds (defaults, metadata) is fine."""
    if isinstance(sent, dict):
        if not isinstance(got, dict):
            return [path or "."]
        return [m for k, v in sent.items() for m in missing(v, got.get(k, _ABSENT), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(got, list) or len(got) != len(sent):
            return [path]
        return [
            m
            for i, (s, g) in enumerate(zip(sent, got, strict=True))
            for m in missing(s, g, f"{path}[{i}]")
        ]
    return [] if sent == got else [path]


_ABSENT = object()


def strict_apply(
    cluster: LocalCluster, obj: dict[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    """Server-side apply with fieldValidation=Strict; the object as the server stored it."""
    args = ["apply", "--server-side", "--field-manager=kvtier-bundle-test", "--validate=strict"]
    if namespace:
        args += ["-n", namespace]
    out = cluster.kubectl(*args, "-o", "json", "-f", "-", stdin=json.dumps(obj))
    stored: dict[str, Any] = json.loads(out)
    return stored


@pytest.fixture(scope="module")
def installed(bare_cluster: LocalCluster) -> dict[str, list[str]]:
    """OLM's CSV CRD, then the bundle's CRDs applied strictly; what each lost on the way."""
    cluster = bare_cluster
    olm_crds = (
        Path(
            os.environ.get("KVTIER_CACHE_DIR")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvtier"
        )
        / "olm-crds"
    )
    # OLM's own CSV schema (OLM does not run here)
    cluster.kubectl("apply", "--server-side", "-f", str(olm_crds))
    cluster.wait_established("clusterserviceversions.operators.coreos.com")
    crds = [
        d
        for p in sorted((BUNDLE / "manifests").glob("*.yaml"))
        for d in _docs(p.read_text())
        if d["kind"] == "CustomResourceDefinition"
    ]
    lost = {}
    for crd in crds:
        lost[crd["metadata"]["name"]] = missing(crd, strict_apply(cluster, crd))
        cluster.wait_established(crd["metadata"]["name"])
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_namespace(EXAMPLES_NS)))
    return lost


EXAMPLES_NS = "bundle-examples"


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_bundle_installs_strictly(
    bare_cluster: LocalCluster, installed: dict[str, list[str]]
) -> None:
    cluster = bare_cluster
    assert sorted(installed) == ["kvcachepolicies.kvcache.io", "kvcachetiers.kvcache.io"]
    assert installed == {name: [] for name in installed}

    csv = yaml.safe_load(CSV_FILE.read_text())
    stored = strict_apply(cluster, csv, namespace="kvtier-system")
    assert missing(csv, stored) == []

    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    assert {e["kind"] for e in examples} == {"KVCacheTier", "KVCachePolicy"}
    for example in examples:
        namespaced = example["kind"] == "KVCacheTier"
        stored = strict_apply(cluster, example, EXAMPLES_NS if namespaced else None)
        assert missing(example, stored) == [], example["kind"]


def test_strict_validation_refuses_an_unknown_field(
    bare_cluster: LocalCluster, installed: dict[str, list[str]]
) -> None:
    """The control for the test above: a field the CRD does not know is an error, not a
    silent prune."""
    csv = yaml.safe_load(CSV_FILE.read_text())
    (tier,) = [
        e
        for e in json.loads(csv["metadata"]["annotations"]["alm-examples"])
        if e["kind"] == "KVCacheTier"
    ]
    tier["metadata"]["name"] = "unknown-field"
    tier["spec"]["workload"]["notAField"] = 1
    # SSA says "field not declared in schema", a create "unknown field": both name it.
    with pytest.raises(ClusterError, match=r"spec\.workload\.notAField"):
        strict_apply(bare_cluster, tier, EXAMPLES_NS)


def test_operator_reads_its_own_pods_image(bare_cluster: LocalCluster) -> None:
    """probe_image under the operator's own identity (deploy/manifests/rbac.yaml): the image
    of the `operator` container of the pod KVTIER_POD_NAME names."""
    from kvtier.controller.registration import probe_image
    from kvtier.kube.rest import Kube, load_client

    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kvtier-operator-self", "namespace": "kvtier-system"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {"name": "other", "image": TAG_REF, "securityContext": restricted},
                {"name": "operator", "image": DIGEST_REF, "securityContext": restricted},
            ],
        },
    }
    bare_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    kube = Kube(load_client(str(bare_cluster.operator_kubeconfig)))
    env = {
        "KVTIER_POD_NAME": "kvtier-operator-self",
        "KVTIER_NAMESPACE": "kvtier-system",
        "RELATED_IMAGE_KVTIER_OPERATOR": TAG_REF,
    }
    assert probe_image(kube, env) == DIGEST_REF
    assert probe_image(kube, {**env, "KVTIER_POD_NAME": "gone"}) == TAG_REF


def test_olms_schema_refuses_a_resource_without_name(
    bare_cluster: LocalCluster, installed: dict[str, list[str]]
) -> None:
    """The control for the CSV: owned[].resources[] entries without `name`, as the bundle
    had them before, fail OLM's own CSV schema."""
    csv = yaml.safe_load(CSV_FILE.read_text())
    csv["metadata"]["name"] = "kvtier-operator.v0.0.1-control"
    for owned in csv["spec"]["customresourcedefinitions"]["owned"]:
        for r in owned["resources"]:
            r.pop("name")
    with pytest.raises(ClusterError, match=r"resources\[0\]\.name: Required value"):
        strict_apply(bare_cluster, csv, namespace="kvtier-system")
