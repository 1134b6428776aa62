"""KServe's own InferenceService controller on the local control plane: the Deployments and pods
it builds from an InferenceService and a ServingRuntime, and vLLM's argv in them.

The manager is KServe v0.20.0's cmd/manager, built from its module by `make kserve`
(``hack/oracles/kserve/build --isvc-controller``) and run as a process in Standard
(RawDeployment) mode with the identity, CRDs, configuration, webhooks and ClusterServingRuntimes
KServe's own config/ declares (hack/localcluster/kserve_isvc_controller.py; its webhooks are
served for real on 127.0.0.1). The pods are the ones kube-controller-manager creates from
KServe's Deployments, as KServe's pod webhook left them. vLLM's command line is the pod's
container command run by bash with stub programs, as test_kserve_controller.py does; what the
real controller writes is compared with what the oracle (tests/kserve_runtime_oracle.py)
renders for the same objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client, watch

from tests.e2e.kserve_isvc import (
    KServeISVCCluster,
    apply_runtime,
    container,
    create_isvc,
    get_isvc,
    plain,
    predictor_deployments,
    predictor_pods,
    vllm_argv,
)
from tests.e2e.kube_helpers import eventually
from tests.kserve_runtime_oracle import merged_pod, runtime_fixture

pytestmark = pytest.mark.timeout(900)

API = "vllm.entrypoints.openai.api_server"
USER_ARGS = ["--max-model-len=8192", "--enable-prefix-caching"]
# The container fields KServe merges, compared between the real controller and the oracle.
MERGED = ("image", "command", "args", "env", "resources", "volumeMounts")
# A pod's: the API server gives a pod requests from its limits where it has none (the GPU), so
# resources are compared in the Deployment's template.
POD = tuple(f for f in MERGED if f != "resources")


def isvc(name: str, **predictor: Any) -> dict[str, Any]:
    """A vLLM InferenceService as OpenShift AI's dashboard writes one (one GPU, a PVC)."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "vLLM"},
                    "storageUri": "pvc://models/llama-3-8b",
                    "args": USER_ARGS,
                    "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}},
                },
                **predictor,
            }
        },
    }


def multi_node(name: str) -> dict[str, Any]:
    obj = isvc(name, workerSpec={"pipelineParallelSize": 2, "tensorParallelSize": 1})
    obj["metadata"]["annotations"] = {"serving.kserve.io/autoscalerClass": "none"}
    return obj


@contextmanager
def deployments_written(api: client.ApiClient, ns: str) -> Iterator[dict[str, dict[str, Any]]]:
    """Every Deployment written in `ns` while the block runs (and a little after), in the last
    state seen: KServe v0.20.0 deletes a multi-node worker Deployment within a second of
    creating it (kserve/kserve#6113), too fast to be found by reading."""
    seen: dict[str, dict[str, Any]] = {}
    w = watch.Watch()  # type: ignore[no-untyped-call]
    started = threading.Event()

    stopping = threading.Event()

    def run() -> None:
        apps = client.AppsV1Api(api)
        started.set()
        try:
            events = w.stream(  # type: ignore[no-untyped-call]
                apps.list_namespaced_deployment, ns, timeout_seconds=120
            )
            for event in events:
                if event["type"] in ("ADDED", "MODIFIED"):
                    obj = plain(api, event["object"])
                    seen[obj["metadata"]["name"]] = obj
        except Exception:
            if not stopping.is_set():  # the stream cut by w.stop() below is the expected end
                raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield seen
    finally:
        stopping.set()
        w.stop()  # type: ignore[no-untyped-call]
        thread.join(timeout=10)


def without_defaults(value: Any) -> Any:
    """A volume or container field without what the API server fills in (secret defaultMode,
    fieldRef apiVersion, the ServiceAccount admission plugin's token volume and mounts)."""
    if isinstance(value, list):
        return [
            without_defaults(v)
            for v in value
            if not (isinstance(v, dict) and str(v.get("name")).startswith("kube-api-access-"))
        ]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k == "defaultMode" and v == 420:
            continue
        if k == "fieldRef" and v.get("apiVersion") == "v1":
            v = {f: x for f, x in v.items() if f != "apiVersion"}
        out[k] = without_defaults(v)
    return out


def assert_agrees(
    real: dict[str, Any], rendered: dict[str, Any], name: str, fields: tuple[str, ...] = MERGED
) -> None:
    """A pod spec the cluster holds and the oracle's: the merged container and the volumes."""
    ours, theirs = container(real, name), container(rendered, name)
    for field in fields:
        assert without_defaults(ours.get(field)) == without_defaults(theirs.get(field)), field
    volumes = {v["name"]: v for v in without_defaults(real.get("volumes") or [])}
    assert volumes == {v["name"]: v for v in without_defaults(rendered.get("volumes") or [])}


def settled_pod(api: client.ApiClient, ns: str, name: str, deployment: str) -> dict[str, Any]:
    def pod() -> dict[str, Any] | None:
        for p in predictor_pods(api, ns, name):
            if p["metadata"]["labels"].get("app") == f"isvc.{deployment}":
                return p
        return None

    found: dict[str, Any] = eventually(pod, timeout=60, what=f"a pod of {deployment}")
    return found


def test_kserve_vllmserver_pod_runs_the_runtimes_args_then_the_services(
    kserve_isvc_cluster: KServeISVCCluster,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """KServe's own ClusterServingRuntime kserve-vllmserver, picked by model format: the
    Deployment's container is the runtime's with the predictor's merged in (args: the
    runtime's, {{.Name}} replaced, then the service's), the pod KServe's pod webhook made of it
    mounts the PVC at /mnt/models, and its command gives vLLM the runtime's flags then the
    user's; the oracle renders the same Deployment and pod."""
    api, kserve = kserve_isvc_cluster.api, kserve_isvc_cluster.kserve
    ns = kserve_namespace(api, "isvc-vllm")
    body = isvc("llama")
    create_isvc(api, ns, body)
    found = eventually(
        lambda: predictor_deployments(api, ns, "llama"), timeout=60, what="the predictor"
    )
    assert set(found) == {"llama-predictor"}
    spec = found["llama-predictor"]["spec"]["template"]["spec"]
    [runtime] = [r for r in kserve.runtimes() if r["metadata"]["name"] == "kserve-vllmserver"]
    [theirs] = runtime["spec"]["containers"]
    main = container(spec, "kserve-container")
    assert main["command"] == theirs["command"] == ["python", "-m", API]
    runtime_args = [a.replace("{{.Name}}", "llama") for a in theirs["args"]]
    assert main["args"] == [*runtime_args, *USER_ARGS]
    assert main["image"] == theirs["image"]
    status = eventually(
        lambda: get_isvc(api, ns, "llama").get("status", {}).get("clusterServingRuntimeName"),
        what="the runtime in the status",
    )
    assert status == "kserve-vllmserver"

    pod = settled_pod(api, ns, "llama", "llama-predictor")
    ctr = container(pod["spec"], "kserve-container")
    [mount] = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/mnt/models"]
    [models] = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert models["persistentVolumeClaim"]["claimName"] == "models"
    assert vllm_argv(ctr, pod) == ["python", "-m", API, *runtime_args, *USER_ARGS]

    body["metadata"]["namespace"] = ns
    oracle = merged_pod(body, [], kserve.runtimes())
    assert oracle["runtime"] == {"name": "kserve-vllmserver", "kind": "ClusterServingRuntime"}
    assert_agrees(spec, oracle["head"]["podTemplate"]["spec"], "kserve-container")
    assert_agrees(pod["spec"], oracle["head"]["pod"], "kserve-container", POD)
    assert oracle["head"]["containers"]["kserve-container"] == vllm_argv(ctr, pod)


def shm(spec: dict[str, Any], name: str) -> dict[str, Any]:
    [mount] = [m for m in container(spec, name)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return dict(volume["emptyDir"])


@pytest.mark.parametrize(
    "runtime", ["vllm-cuda-runtime", "vllm-multinode-runtime", "vllm-multinode-runtime-mp"]
)
def test_openshift_ai_runtimes_load_into_kserve(
    kserve_isvc_cluster: KServeISVCCluster,
    runtime: str,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """OpenShift AI's runtime shapes (tests/fixtures/runtimes) pass KServe's ServingRuntime
    webhook and KServe builds their Deployments: the head for every one, and for the multi-node
    ones a worker Deployment from the workerSpec (which v0.20.0 deletes again), each with a 12Gi
    memory /dev/shm; the same as the oracle renders."""
    api, kserve = kserve_isvc_cluster.api, kserve_isvc_cluster.kserve
    ns = kserve_namespace(api, "isvc-odh")
    sr = runtime_fixture(runtime)
    apply_runtime(api, ns, sr)
    body = multi_node("big") if "multinode" in runtime else isvc("big")
    with deployments_written(api, ns) as seen:
        create_isvc(api, ns, body)
        want = {"big-predictor", "big-predictor-worker"} if "workerSpec" in sr["spec"] else None
        eventually(
            lambda: set(seen) == (want or {"big-predictor"}), timeout=60, what=f"{want} written"
        )
    chosen = eventually(
        lambda: get_isvc(api, ns, "big").get("status", {}).get("servingRuntimeName"),
        what="the runtime in the status",
    )
    assert chosen == sr["metadata"]["name"]
    body["metadata"]["namespace"] = ns
    oracle = merged_pod(body, [sr], kserve.runtimes())
    assert oracle["errors"] == []
    head = seen["big-predictor"]["spec"]["template"]["spec"]
    assert_agrees(head, oracle["head"]["podTemplate"]["spec"], "kserve-container")
    pod = settled_pod(api, ns, "big", "big-predictor")
    assert_agrees(pod["spec"], oracle["head"]["pod"], "kserve-container", POD)
    if want is None:
        ctr = container(pod["spec"], "kserve-container")
        assert vllm_argv(ctr, pod) == [
            "python",
            "-m",
            API,
            "--port=8080",
            "--model=/mnt/models",
            "--served-model-name=big",
            *USER_ARGS,
        ]
        return
    worker = seen["big-predictor-worker"]["spec"]["template"]["spec"]
    assert_agrees(worker, oracle["worker"]["podTemplate"]["spec"], "worker-container")
    for spec, name in ((head, "kserve-container"), (worker, "worker-container")):
        assert shm(spec, name) == {"medium": "Memory", "sizeLimit": "12Gi"}
    # v0.20.0's own cleanup takes the worker back (kserve/kserve#6113), in the same reconcile
    # or the next; the head stays.
    eventually(
        lambda: set(predictor_deployments(api, ns, "big")) == {"big-predictor"},
        timeout=60,
        what="KServe's cleanup of its worker Deployment",
    )
    if runtime == "vllm-multinode-runtime":
        # The Ray head's script execs vLLM with its own flags: the user's args are dropped.
        ctr = container(pod["spec"], "kserve-container")
        assert ctr["args"][1:] == USER_ARGS
        argv = vllm_argv(ctr, pod)
        assert argv == oracle["head"]["containers"]["kserve-container"]
        assert argv[:3] == ["python3", "-m", API]
        assert not set(USER_ARGS) & set(argv)
        assert "--pipeline-parallel-size=2" in argv
