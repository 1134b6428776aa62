"""KServe's own InferenceService controller as an oracle: the Deployments and pods it builds
from an InferenceService and its ServingRuntimes.

The harness is hack/oracles/kserve/runtime/main.go, built against KServe's Go module at the
pinned version by ``hack/oracles/kserve/build --runtime-oracle`` (``make kserve`` builds it
before the tests; here the build script only answers with the cached binary). It runs KServe's
ServingRuntime webhooks, its InferenceService defaulting and validation, GetSupportingRuntimes,
the InferenceService reconciler (Standard deployment mode) on a fake client, and KServe's pod
webhook on each Deployment's pod; then each container's command with stub ``vllm`` /
``python -m vllm.entrypoints.openai.api_server`` / ``ray`` programs (the header of main.go says
what runs and what does not).

API:
    render(isvc, serving_runtimes=(), cluster_serving_runtimes=()) -> dict
        the harness's whole output (runtime validation, validation, supportingRuntimes,
        runtime, reconcileErrors, deployments);
    merged_pod(isvc, serving_runtimes=(), cluster_serving_runtimes=()) -> dict
        {"runtime": {"name", "kind"} | None, "supportingRuntimes": [...], "head": Role | None,
         "worker": Role | None, "errors": [...]}, each Role {"deployment", "podTemplate" (the
         Deployment's template as KServe last wrote it), "pod" (its spec after KServe's pod
         webhook), "containers" ({name: vllmArgv or None}), "vllmErrors" ({name: why not}),
         "deletedByKServe" (v0.20.0 deletes the multi-node worker Deployment it wrote,
         kserve/kserve#6113), "container" (the merged kserve-container or worker-container of
         "pod")}; raises OracleError when the harness itself failed;
    kserve_runtimes() -> list[dict]
        KServe's ClusterServingRuntimes (config/runtimes of the module) as its kustomization
        renders them (images set), by the kubectl built for the local control plane;
    runtime_fixture(name) -> dict
        a ServingRuntime of tests/fixtures/runtimes (OpenShift AI's shapes).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import yaml

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "hack" / "oracles" / "kserve" / "build"
FIXTURES = REPO / "tests" / "fixtures" / "runtimes"
KSERVE_MODULE = "github.com/kserve/kserve"
PREDICTOR_CONTAINER = "kserve-container"  # KServe's constants.InferenceServiceContainerName
WORKER_CONTAINER = "worker-container"  # constants.WorkerContainerName

if str(REPO / "hack" / "localcluster") not in sys.path:
    sys.path.insert(0, str(REPO / "hack" / "localcluster"))


class OracleError(RuntimeError):
    pass


@functools.cache
def binary() -> Path:
    """The harness, as the build script reports it (cached after `make kserve`)."""
    proc = subprocess.run(
        ["bash", str(BUILD), "--runtime-oracle"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise OracleError(
            f"{BUILD.relative_to(REPO)} --runtime-oracle failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def kserve_version() -> str:
    """The KServe version the harness was built from (its stamp's first word)."""
    return Path(f"{binary()}.version").read_text().split()[0]


def render(
    isvc: Mapping[str, Any],
    serving_runtimes: Iterable[Mapping[str, Any]] = (),
    cluster_serving_runtimes: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    body = {
        "inferenceService": isvc,
        "servingRuntimes": list(serving_runtimes),
        "clusterServingRuntimes": list(cluster_serving_runtimes),
    }
    proc = subprocess.run(
        [str(binary())], input=json.dumps(body), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise OracleError(f"kserve-runtime-oracle (exit {proc.returncode}): {proc.stderr[-4000:]}")
    return cast(dict[str, Any], json.loads(proc.stdout))


def _role(deployment: Mapping[str, Any], container: str) -> dict[str, Any]:
    pod = deployment["pod"] or deployment["podTemplate"]["spec"]
    [merged] = [c for c in pod["containers"] if c["name"] == container] or [None]
    return {
        "deployment": deployment["name"],
        "podTemplate": deployment["podTemplate"],
        "pod": pod,
        "podError": deployment.get("podError"),
        "deletedByKServe": deployment["deletedByKServe"],
        "containers": {c["name"]: c.get("vllmArgv") for c in deployment["containers"]},
        "vllmErrors": {
            c["name"]: c["vllmError"] for c in deployment["containers"] if c.get("vllmError")
        },
        "container": merged,
    }


def merged_pod(
    isvc: Mapping[str, Any],
    serving_runtimes: Iterable[Mapping[str, Any]] = (),
    cluster_serving_runtimes: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The runtime KServe chose and the head's (and worker's) pods it builds."""
    out = render(isvc, serving_runtimes, cluster_serving_runtimes)
    roles = {d["role"]: d for d in out["deployments"]}
    errors = [*out["reconcileErrors"]]
    if out["validation"].get("error"):
        errors.insert(0, f"validation: {out['validation']['error']}")
    errors += [
        f"{v['kind']} {v['name']}: {v['message']}"
        for v in out["runtimeValidation"]
        if not v["allowed"]
    ]
    return {
        "runtime": out["runtime"],
        "supportingRuntimes": out["supportingRuntimes"],
        "head": _role(roles["head"], PREDICTOR_CONTAINER) if "head" in roles else None,
        "worker": _role(roles["worker"], WORKER_CONTAINER) if "worker" in roles else None,
        "errors": errors,
    }


@functools.cache
def _kserve_runtime_docs() -> str:
    from kserve_controller import download  # hack/localcluster
    from localcluster import build_binaries

    module = download(KSERVE_MODULE, kserve_version())
    proc = subprocess.run(
        [str(build_binaries() / "kubectl"), "kustomize", str(module.dir / "config" / "runtimes")],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise OracleError(f"kubectl kustomize config/runtimes: {proc.stderr[-2000:]}")
    return proc.stdout


def kserve_runtimes() -> list[dict[str, Any]]:
    """KServe's own ClusterServingRuntimes, images set as its kustomization sets them."""
    return [d for d in yaml.safe_load_all(_kserve_runtime_docs()) if d]


def kserve_runtime(name: str) -> dict[str, Any]:
    [found] = [r for r in kserve_runtimes() if r["metadata"]["name"] == name]
    return found


def runtime_fixture(name: str) -> dict[str, Any]:
    """A ServingRuntime of tests/fixtures/runtimes by file name (without .yaml)."""
    return cast(dict[str, Any], yaml.safe_load((FIXTURES / f"{name}.yaml").read_text()))
