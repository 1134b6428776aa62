"""Fixtures for tests that run the operator: CRDs installed, the operator running as the
restricted kvtier-operator identity, KServe's own manager beside it on a control plane of its
own, and helpers to build model-server targets."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from kserve_controller import KServeController
from kserve_isvc_controller import KServeISVCController
from localcluster import LocalCluster
from tests.conftest import api_client
from tests.e2e.kserve_isvc import (
    KServeISVCCluster,
    KServeISVCStack,
    delete_namespace,
    plain_namespace,
)
from tests.e2e.kube_helpers import apply_policy
from tests.e2e.operator_process import OperatorProcess
from tests.early_release import RELEASE

REPO = Path(__file__).resolve().parents[2]


def install_crds(cluster: LocalCluster, kvtier_crds: Path = REPO / "deploy" / "crds") -> None:
    """kvtier's CRDs and the real ones of KServe and Rook (fetched from their Go modules).
    kvtier writes no ODF StorageCluster, so no stand-in for it is needed."""
    cluster.install_crds(kvtier_crds)
    cluster.install_upstream_crds("full")


@pytest.fixture(scope="session")
def crds(cluster: LocalCluster) -> None:
    install_crds(cluster)


@contextmanager
def own_cluster(
    prefix: str, kvtier_crds: Path = REPO / "deploy" / "crds"
) -> Iterator[LocalCluster]:
    """A control plane with the CRDs for one module alone: no session operator acts on it.
    `kvtier_crds` are the first kvtier CRDs it serves (a changed schema is served a moment
    after its CRD is updated, while Established stays True: no wait can tell when)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"kvtier-{prefix}-"))
    local = LocalCluster(workdir)
    try:
        local.up()
        install_crds(local, kvtier_crds)
        yield local
    finally:
        local.down()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def operator(
    cluster: LocalCluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(cluster, log).start()
    RELEASE.register("operator", proc.stop)
    try:
        yield proc
    finally:
        proc.stop()
        print(f"operator log: {log}")


@dataclass
class KServeStack:
    cluster: LocalCluster
    api: client.ApiClient
    kserve: KServeController
    operator: OperatorProcess


@pytest.fixture(scope="session")
def kserve_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KServeStack]:
    """A control plane of its own (the webhooks and conversion KServe registers would reach
    every other test's LLMInferenceService), KServe's manager and kvtier's operator on it,
    started once for every module that drives both controllers (each in namespaces of its own).
    """
    from tests.e2e.test_operator_apply import POLICY  # here: that module imports this one

    logs = tmp_path_factory.mktemp("kserve-controller")
    with own_cluster("kserve-ctl") as cluster:
        kserve = KServeController(cluster, logs)
        operator = OperatorProcess(cluster, logs / "operator.log")
        try:
            kserve.start()
            api = api_client(cluster.admin_kubeconfig)
            apply_policy(api, POLICY)
            operator.start()

            def stop() -> None:
                operator.stop()
                kserve.stop()
                cluster.down()

            RELEASE.register("kserve_stack", stop)
            yield KServeStack(cluster, api, kserve, operator)
        finally:
            operator.stop()
            kserve.stop()
            print(f"logs: {logs}")


@pytest.fixture(scope="session")
def kserve_isvc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KServeISVCCluster]:
    """A control plane of its own (KServe's pod webhook and runtime validation would reach
    every other test's objects) with KServe's InferenceService manager running
    (tests/e2e/kserve_isvc.py), shared by every module that drives it."""
    logs = tmp_path_factory.mktemp("kserve-isvc")
    with own_cluster("kserve-isvc") as cluster:
        kserve = KServeISVCController(cluster, logs)
        try:
            kserve.start()

            def stop() -> None:
                kserve.stop()
                cluster.down()

            RELEASE.register("kserve_isvc_cluster", stop)
            yield KServeISVCCluster(cluster, api_client(cluster.admin_kubeconfig), kserve)
        finally:
            kserve.stop()
            print(f"kserve manager log: {kserve.log_path}")


@pytest.fixture(scope="session")
def kserve_isvc_stack(
    kserve_isvc_cluster: KServeISVCCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KServeISVCStack]:
    """kserve_isvc_cluster with kvtier's operator beside KServe's manager."""
    from tests.e2e.test_operator_apply import POLICY  # here: that module imports this one

    base = kserve_isvc_cluster
    log = tmp_path_factory.mktemp("kserve-isvc-operator") / "operator.log"
    apply_policy(base.api, POLICY)
    operator = OperatorProcess(base.cluster, log).start()
    RELEASE.register("kserve_isvc_stack", operator.stop)
    try:
        yield KServeISVCStack(base.cluster, base.api, base.kserve, operator)
    finally:
        operator.stop()
        print(f"operator log: {log}")


def llm_inference_service(
    name: str,
    *,
    tp: int,
    replicas: int = 1,
    model_uri: str,
    api_version: str = "serving.kserve.io/v1alpha2",
    memory: str = "256Gi",
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "LLMInferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"uri": model_uri},
            "replicas": replicas,
            "parallelism": {"tensor": tp},
            "template": {
                "containers": [
                    {
                        "name": "main",
                        "image": "vllm/vllm-openai:v0.24.0",
                        "resources": {
                            "limits": {"nvidia.com/gpu": str(tp), "memory": memory},
                            "requests": {"nvidia.com/gpu": str(tp), "memory": memory},
                        },
                    }
                ]
            },
        },
    }


def inference_service(
    name: str, *, tp: int, model_uri: str, min_replicas: int = 1, max_replicas: int | None = None
) -> dict[str, Any]:
    predictor: dict[str, Any] = {
        "minReplicas": min_replicas,
        "model": {
            "modelFormat": {"name": "vLLM"},
            "storageUri": model_uri,
            "args": ["--tensor-parallel-size", str(tp), "--max-model-len", "131072"],
            "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
            "resources": {"limits": {"nvidia.com/gpu": str(tp), "memory": "256Gi"}},
        },
    }
    if max_replicas is not None:
        predictor["maxReplicas"] = max_replicas
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"predictor": predictor},
    }


def create_target(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    group, version = body["apiVersion"].split("/")
    plural = {
        "LLMInferenceService": "llminferenceservices",
        "InferenceService": "inferenceservices",
    }[body["kind"]]
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, ns, plural, body
    )
    return cast(dict[str, Any], created)


@pytest.fixture
def kserve_namespace() -> Iterator[Callable[[client.ApiClient, str], str]]:
    """plain_namespace for one test: the namespaces it made are deleted after it."""
    made: list[tuple[client.ApiClient, str]] = []

    def make(api: client.ApiClient, prefix: str) -> str:
        made.append((api, plain_namespace(api, prefix)))
        return made[-1][1]

    yield make
    for api, name in made:
        delete_namespace(api, name)
