"""The InferenceService + ServingRuntime oracle (tests/kserve_runtime_oracle.py) on KServe's own
ClusterServingRuntime kserve-vllmserver and on OpenShift AI's runtime shapes
(tests/fixtures/runtimes): which runtime KServe picks, the pod it builds, vLLM's argv.

No cluster is needed (it is under tests/e2e because it runs a Go build's output, built by
`make kserve`, like test_kserve_offload.py); a failed build fails these tests, they never skip.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.kserve_runtime_oracle import (
    kserve_runtime,
    kserve_runtimes,
    kserve_version,
    merged_pod,
    runtime_fixture,
)

API = "vllm.entrypoints.openai.api_server"
USER_ARGS = ["--max-model-len=8192", "--enable-prefix-caching"]


def isvc(name: str, *, gpus: int = 1, **model: Any) -> dict[str, Any]:
    """The InferenceService OpenShift AI's dashboard writes for a vLLM model (Standard mode)."""
    spec: dict[str, Any] = {
        "modelFormat": {"name": "vLLM"},
        "storageUri": "pvc://models/llama-3-8b",
        "args": USER_ARGS,
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "64Gi"}},
        **model,
    }
    if not gpus:
        del spec["resources"]["limits"]["nvidia.com/gpu"]
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "llm"},
        "spec": {"predictor": {"model": spec}},
    }


def env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_kserve_vllmserver_merges_runtime_then_user_args() -> None:
    """KServe's own runtime, auto-selected by format: its container with the predictor's merged
    in (args the runtime's then the service's, {{.Name}} replaced), its /dev/shm, the PVC at
    /mnt/models from KServe's pod webhook; vLLM's argv through `python -m`."""
    assert kserve_version() == "v0.20.0"
    runtime = kserve_runtime("kserve-vllmserver")
    out = merged_pod(isvc("llama"), cluster_serving_runtimes=kserve_runtimes())
    assert out["errors"] == []
    assert out["runtime"] == {"name": "kserve-vllmserver", "kind": "ClusterServingRuntime"}
    assert out["supportingRuntimes"] == [out["runtime"]]
    assert out["worker"] is None
    head = out["head"]
    assert head["deployment"] == "llama-predictor" and not head["deletedByKServe"]
    ctr = head["container"]
    [theirs] = runtime["spec"]["containers"]
    assert ctr["image"] == theirs["image"] == "vllm/vllm-openai:latest"  # GPU asked: kept
    assert ctr["command"] == theirs["command"] == ["python", "-m", API]
    runtime_args = [a.replace("{{.Name}}", "llama") for a in theirs["args"]]
    assert ctr["args"] == [*runtime_args, *USER_ARGS]
    assert head["containers"]["kserve-container"] == ["python", *ctr["command"][1:], *ctr["args"]]
    # env: the runtime's, the user's, KServe's own
    assert env(ctr) == {
        **{e["name"]: e["value"] for e in theirs["env"]},
        "HF_HUB_OFFLINE": "1",
        "INFERENCE_SERVICE_NAME": "llama",
    }
    # resources: the user's limits over the runtime's, the runtime's requests
    assert ctr["resources"]["limits"] == {"cpu": "1", "memory": "64Gi", "nvidia.com/gpu": "1"}
    assert ctr["resources"]["requests"] == theirs["resources"]["requests"]
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    [shm] = [v for v in head["pod"]["volumes"] if v["name"] == mounts["/dev/shm"]["name"]]
    assert shm["emptyDir"] == {"medium": "Memory"}
    [models] = [v for v in head["pod"]["volumes"] if v["name"] == mounts["/mnt/models"]["name"]]
    assert models["persistentVolumeClaim"] == {"claimName": "models"}
    assert mounts["/mnt/models"]["subPath"] == "llama-3-8b"


def test_kserve_vllmserver_without_gpu_takes_the_cpu_image() -> None:
    """UpdateImageTag: no GPU asked, vllm/vllm-openai becomes its -cpu sibling."""
    out = merged_pod(isvc("cpu", gpus=0), cluster_serving_runtimes=kserve_runtimes())
    assert out["head"]["container"]["image"] == "vllm/vllm-openai-cpu:latest"


def test_runtime_version_replaces_the_image_tag() -> None:
    """spec.predictor.model.runtimeVersion: the runtime's image at that tag."""
    cuda = runtime_fixture("vllm-cuda-runtime")
    out = merged_pod(isvc("pinned", runtimeVersion="v3.4.0"), [cuda])
    image = cuda["spec"]["containers"][0]["image"]
    assert out["head"]["container"]["image"] == image.rsplit(":", 1)[0] + ":v3.4.0"


def test_namespace_runtime_before_cluster_runtime_unless_named() -> None:
    """OpenShift AI's vllm-cuda-runtime in the namespace wins over KServe's cluster runtime of
    the same format; spec.predictor.model.runtime naming the cluster one wins over both."""
    cuda = runtime_fixture("vllm-cuda-runtime")
    out = merged_pod(isvc("llama"), [cuda], kserve_runtimes())
    assert out["errors"] == []
    assert out["supportingRuntimes"] == [
        {"name": "vllm-cuda-runtime", "kind": "ServingRuntime"},
        {"name": "kserve-vllmserver", "kind": "ClusterServingRuntime"},
    ]
    assert out["runtime"] == out["supportingRuntimes"][0]
    ctr = out["head"]["container"]
    # The Red Hat image as the runtime names it: its tag is not vLLM's version.
    assert ctr["image"] == cuda["spec"]["containers"][0]["image"]
    assert out["head"]["containers"]["kserve-container"] == [
        "python",
        "-m",
        API,
        "--port=8080",
        "--model=/mnt/models",
        "--served-model-name=llama",
        *USER_ARGS,
    ]
    named = merged_pod(isvc("llama", runtime="kserve-vllmserver"), [cuda], kserve_runtimes())
    assert named["runtime"] == {"name": "kserve-vllmserver", "kind": "ClusterServingRuntime"}
    assert named["head"]["container"]["image"] == "vllm/vllm-openai:latest"


def multi_node(name: str) -> dict[str, Any]:
    obj = isvc(name, gpus=1)
    obj["metadata"]["annotations"] = {"serving.kserve.io/autoscalerClass": "none"}
    obj["spec"]["predictor"]["workerSpec"] = {"pipelineParallelSize": 2, "tensorParallelSize": 1}
    return obj


def shm_of(role: dict[str, Any]) -> dict[str, Any]:
    [mount] = [m for m in role["container"]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    [volume] = [v for v in role["pod"]["volumes"] if v["name"] == mount["name"]]
    return dict(volume["emptyDir"])


def test_multinode_ray_runtime_drops_the_users_args() -> None:
    """OpenShift AI's Ray-shaped multi-node runtime: a head and a worker Deployment (the
    worker deleted again by v0.20.0's own cleanup, kserve/kserve#6113); the head's script
    execs vLLM with its own flags and KServe's multi-node env, the user's args dropped; a 12Gi
    memory /dev/shm on both."""
    out = merged_pod(multi_node("big"), [runtime_fixture("vllm-multinode-runtime")])
    assert out["errors"] == []
    assert out["runtime"] == {"name": "vllm-multinode-runtime", "kind": "ServingRuntime"}
    head, worker = out["head"], out["worker"]
    assert (head["deployment"], worker["deployment"]) == ("big-predictor", "big-predictor-worker")
    assert not head["deletedByKServe"] and worker["deletedByKServe"]
    # KServe appended the user's args after the script: bash makes them $0, $1 and drops them.
    assert head["container"]["args"][1:] == USER_ARGS
    assert head["containers"]["kserve-container"] == [
        "python3",
        "-m",
        API,
        "--port=8080",
        "--distributed-executor-backend",
        "ray",
        "--model=/mnt/models",
        "--served-model-name=big",
        "--tensor-parallel-size=1",
        "--pipeline-parallel-size=2",
        "--disable_custom_all_reduce",
    ]
    assert {"PIPELINE_PARALLEL_SIZE": "2", "TENSOR_PARALLEL_SIZE": "1"}.items() <= env(
        head["container"]
    ).items()
    assert worker["containers"]["worker-container"] is None  # Ray workers run no vLLM
    assert "HEAD_SVC" in env(worker["container"])
    for role in (head, worker):
        assert shm_of(role) == {"medium": "Memory", "sizeLimit": "12Gi"}


def test_multinode_mp_runtime_builds_head_and_worker() -> None:
    """The current (mp) shape: both Deployments built; their args hold $(VAR) references the
    kubelet expands, which the oracle reports instead of running."""
    out = merged_pod(multi_node("big"), [runtime_fixture("vllm-multinode-runtime-mp")])
    assert out["errors"] == []
    head, worker = out["head"], out["worker"]
    assert head["container"]["command"] == ["vllm", "serve"]
    assert head["container"]["args"][-len(USER_ARGS) :] == USER_ARGS
    assert worker["container"]["command"][:2] == ["bash", "-c"]
    for role, name in ((head, "kserve-container"), (worker, "worker-container")):
        assert "kubelet expands" in role["vllmErrors"][name]
        assert shm_of(role) == {"medium": "Memory", "sizeLimit": "12Gi"}


@pytest.mark.parametrize("runtime", ["vllm-multinode-runtime", "vllm-multinode-runtime-mp"])
def test_multinode_runtime_is_not_picked_for_a_single_node_service(runtime: str) -> None:
    """GetSupportingRuntimes: a runtime with a workerSpec serves only a service with one."""
    out = merged_pod(isvc("one"), [runtime_fixture(runtime)], kserve_runtimes())
    assert out["runtime"] == {"name": "kserve-vllmserver", "kind": "ClusterServingRuntime"}
