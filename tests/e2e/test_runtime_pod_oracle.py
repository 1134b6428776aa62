"""kvtier's reading of an InferenceService's pod (targets/serving_runtime.py) against the pod
KServe's own InferenceService controller code builds (tests/kserve_runtime_oracle.py), and
kvtier's writes checked in that pod: KServe's ClusterServingRuntimes (config/runtimes of the
module) and OpenShift AI's runtime shapes (tests/fixtures/runtimes).

No cluster is needed (under tests/e2e because it runs a Go build's output, built by
`make kserve`); a failed build fails these tests, they never skip.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvtier.names.objects import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.render.quantities import quantity_to_bytes
from kvtier.render.result import RenderError
from kvtier.sizing.vllm import SHM_PATH
from kvtier.targets.base import Conflict
from kvtier.targets.inference_service import INFERENCE_SERVICE
from kvtier.targets.pod import KV_FLAG
from kvtier.targets.serving_runtime import NoRuntime, Runtime, merged_pod, select_runtime
from tests.kserve_runtime_oracle import kserve_runtimes, runtime_fixture
from tests.kserve_runtime_oracle import merged_pod as kserve_pod
from tests.pod_security import restricted_target, restricted_violations
from tests.unit.test_pod_security import DISKS, LOOSENING, _keys
from tests.unit.test_pod_security import _offload as disk_offload
from tests.unit.test_render_targets import _applied_to, _offload

NS = "llm"


def isvc(name: str = "llama", **model: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modelFormat": {"name": "vLLM"},
        "storageUri": "pvc://models/llama-3-8b",
        "args": ["--tensor-parallel-size=2", "--max-model-len=8192"],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "HF_HOME", "value": "/data"}],
        "resources": {"limits": {"nvidia.com/gpu": "2"}},
        **model,
    }
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"predictor": {"model": spec, "nodeSelector": {"pool": "h100"}}},
    }


def runtimes(shape: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ServingRuntimes of the namespace, ClusterServingRuntimes) for a runtime shape."""
    cluster = kserve_runtimes()
    if shape == "kserve":
        return [], cluster
    local = runtime_fixture(shape)
    local.setdefault("metadata", {})["namespace"] = NS
    return [local], cluster


def related(shape: str) -> list[dict[str, Any]]:
    local, cluster = runtimes(shape)
    return [
        *({**r, "kind": "ServingRuntime"} for r in local),
        *({**r, "kind": "ClusterServingRuntime"} for r in cluster),
    ]


def kvtiers_pod(obj: dict[str, Any], shape: str) -> tuple[Runtime, dict[str, Any], dict[str, Any]]:
    found = select_runtime(obj, related(shape))
    assert isinstance(found, Runtime), found
    built = merged_pod(obj, found)
    assert not isinstance(built, NoRuntime), built
    return found, built.container, built.pod


def named(items: list[dict[str, Any]] | None, key: str, keys: set[Any]) -> list[dict[str, Any]]:
    return [i for i in items or [] if i.get(key) in keys]


SHAPES = ["kserve", "vllm-cuda-runtime"]
CASES: dict[str, dict[str, Any]] = {
    "auto": {},
    "named-cluster": {"runtime": "kserve-vllmserver"},
    "runtime-version": {"runtimeVersion": "v0.25.1"},
    "own-limits": {"resources": {"limits": {"nvidia.com/gpu": "2", "memory": "96Gi", "cpu": "8"}}},
    # /dev/shm mounted from the runtime's own memory emptyDir (KServe's runtime has one).
    "own-shm": {"volumeMounts": [{"name": "devshm", "mountPath": SHM_PATH}]},
}
WRITE_CASES = [
    (shape, case)
    for shape in SHAPES
    for case in ("auto", "own-limits", "own-shm")
    if (shape, case) != ("vllm-cuda-runtime", "own-shm")
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_kvtier_reads_the_pod_kserve_builds(shape: str, case: str) -> None:
    """The runtime kvtier picks and its merged container and pod are KServe's, in every field
    kvtier reads (KServe adds more of its own: the storage mount, its env, defaults)."""
    obj = isvc(**CASES[case])
    local, cluster = runtimes(shape)
    theirs = kserve_pod(obj, local, cluster)
    assert theirs["errors"] == []
    runtime, container, pod = kvtiers_pod(obj, shape)
    assert {"name": runtime.name, "kind": runtime.kind} == theirs["runtime"]
    want = theirs["head"]["container"]
    assert container["image"] == want["image"]
    assert container.get("command") == want.get("command")
    name = obj["metadata"]["name"]
    assert [a.replace("{{.Name}}", name) for a in container["args"]] == want["args"]
    assert container["resources"] == want["resources"]
    env_names = {e["name"] for e in container.get("env") or []}
    assert (container.get("env") or []) == named(want.get("env"), "name", env_names)
    mounts = {m["mountPath"] for m in container.get("volumeMounts") or []}
    assert (container.get("volumeMounts") or []) == named(
        want.get("volumeMounts"), "mountPath", mounts
    )
    volumes = {v["name"] for v in pod.get("volumes") or []}
    assert (pod.get("volumes") or []) == named(
        theirs["head"]["pod"].get("volumes"), "name", volumes
    )
    assert pod["nodeSelector"] == theirs["head"]["pod"]["nodeSelector"]
    facts = INFERENCE_SERVICE.facts(obj, related(shape))
    assert facts.tensor_parallel_size == 2
    limit = want["resources"].get("limits", {}).get("memory")
    assert facts.memory_limit_bytes == (None if limit is None else quantity_to_bytes(limit))


@pytest.mark.parametrize(("shape", "case"), WRITE_CASES)
def test_kvtiers_writes_land_in_the_pod_kserve_builds(shape: str, case: str) -> None:
    """The InferenceService with kvtier's writes applied, through KServe's own controller code:
    vLLM's argv carries kvtier's flag, the pod has exactly one /dev/shm mount, kvtier's memory
    emptyDir of its size, and the memory request and limit kvtier sized (above the runtime's
    2Gi limit); the user's own args and env are there too."""
    obj = isvc(**CASES[case])
    offload = _offload()
    writes = INFERENCE_SERVICE.writes(obj, offload, None, related(shape))
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    local, cluster = runtimes(shape)
    head = kserve_pod(after, local, cluster)["head"]
    argv = head["containers"]["kserve-container"]
    assert argv[argv.index(KV_FLAG) + 1] == offload.arg
    assert "--max-model-len=8192" in argv
    container, pod = head["container"], head["pod"]
    shm = [m for m in container["volumeMounts"] if m["mountPath"] == SHM_PATH]
    assert len(shm) == 1
    [volume] = [v for v in pod["volumes"] if v["name"] == shm[0]["name"]]
    assert quantity_to_bytes(volume["emptyDir"]["sizeLimit"]) == offload.plan.shm_bytes
    if case != "own-shm":
        assert shm[0]["name"] == DSHM_VOLUME
    model = writes[-1].body["spec"]["predictor"]["model"]
    assert container["resources"]["requests"]["memory"] == model["resources"]["requests"]["memory"]
    # A limit where the runtime or the user set one, never below the request; none otherwise.
    limit = container["resources"].get("limits", {}).get("memory")
    had = case == "own-limits" or shape == "kserve"
    assert (limit is not None) == had
    if limit is not None:
        assert quantity_to_bytes(limit) >= quantity_to_bytes(
            model["resources"]["requests"]["memory"]
        )
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]


@pytest.mark.parametrize("disk", sorted(DISKS))
def test_kvtiers_writes_keep_the_pod_kserve_builds_restricted(disk: str) -> None:
    """A restricted user's service on KServe's runtime (tests/unit/test_pod_security.py's
    case for an InferenceService, on the pod KServe's code and pod webhook build): kvtier
    writes no security setting, the pod passes the restricted standard with kvtier's writes
    as without them, its securityContexts are the user's pod's, and kvtier's additions are in
    it (one /dev/shm, kvtier's memory emptyDir; the disk claim or claim template)."""
    user = restricted_target(isvc())
    writes = INFERENCE_SERVICE.writes(user, disk_offload(disk), None, related("kserve"))
    assert not isinstance(writes, Conflict)
    written = {k for w in writes for k in _keys(w.body)}
    assert not written & LOOSENING, written & LOOSENING
    local, cluster = runtimes("kserve")
    before = kserve_pod(user, local, cluster)["head"]
    after = kserve_pod(_applied_to(user, writes), local, cluster)["head"]
    assert restricted_violations(before["pod"]) == []
    assert restricted_violations(after["pod"]) == []
    assert after["pod"]["securityContext"] == before["pod"]["securityContext"]
    assert after["container"]["securityContext"] == before["container"]["securityContext"]
    volumes = {v["name"]: v for v in after["pod"]["volumes"]}
    [shm] = [m for m in after["container"]["volumeMounts"] if m["mountPath"] == SHM_PATH]
    assert shm["name"] == DSHM_VOLUME and volumes[DSHM_VOLUME]["emptyDir"]["medium"] == "Memory"
    if disk == "NVMe":
        assert "ephemeral" in volumes[KV_CACHE_VOLUME]
    elif disk == "CephFS":
        assert "persistentVolumeClaim" in volumes[KV_CACHE_VOLUME]


def test_a_runtime_that_drops_the_args_is_refused_where_kserve_drops_them() -> None:
    """A single-node runtime whose bash script execs vLLM with its own flags: KServe's pod
    really runs vLLM without the InferenceService's args, so kvtier refuses (FlagNotPassed)."""
    dropping = runtime_fixture("vllm-cuda-runtime")
    dropping["metadata"]["namespace"] = NS
    [container] = dropping["spec"]["containers"]
    container["command"] = [
        "bash",
        "-c",
        "exec python -m vllm.entrypoints.openai.api_server --port=8080 --model=/mnt/models",
    ]
    container["args"] = []
    obj = isvc()
    argv = kserve_pod(obj, [dropping], kserve_runtimes())["head"]["containers"]["kserve-container"]
    assert "--max-model-len=8192" not in argv  # KServe's pod drops the service's args
    rel = [dropping, *({**r, "kind": "ClusterServingRuntime"} for r in kserve_runtimes())]
    with pytest.raises(RenderError) as err:
        INFERENCE_SERVICE.writes(obj, _offload(), None, rel)
    assert err.value.reason == "FlagNotPassed" and "vllm-cuda-runtime" in err.value.message
    forwarding = copy.deepcopy(dropping)
    forwarding["spec"]["containers"][0]["command"][2] += ' "$@"'
    forwarding["spec"]["containers"][0]["command"].append("--")
    argv = kserve_pod(obj, [forwarding], kserve_runtimes())["head"]["containers"][
        "kserve-container"
    ]
    assert "--max-model-len=8192" in argv
    rel[0] = forwarding
    assert not isinstance(INFERENCE_SERVICE.writes(obj, _offload(), None, rel), Conflict)


def multi_node(name: str = "big") -> dict[str, Any]:
    obj = isvc(name)
    obj["metadata"]["annotations"] = {"serving.kserve.io/autoscalerClass": "none"}
    obj["spec"]["predictor"]["model"]["args"] = ["--max-model-len=8192"]
    obj["spec"]["predictor"]["workerSpec"] = {"pipelineParallelSize": 2, "tensorParallelSize": 1}
    return obj


def mp_runtime() -> list[dict[str, Any]]:
    local = runtime_fixture("vllm-multinode-runtime-mp")
    local["metadata"]["namespace"] = NS
    return [local]


def test_a_multi_node_service_is_one_engine_over_its_head_and_worker_pods() -> None:
    """OpenShift AI's mp multi-node runtime: kvtier reads one engine of tensor 1 × pipeline 2
    over a head and a worker pod (the sizes KServe gives both as env), as KServe builds them."""
    obj = multi_node()
    rel = [{**r, "kind": "ServingRuntime"} for r in mp_runtime()]
    facts = INFERENCE_SERVICE.facts(obj, rel)
    [role] = facts.roles
    assert (role.tensor, role.pipeline, role.multi_node) == (1, 2, True)
    assert role.pods_per_replica == 2
    assert facts.tensor_parallel_size == 1  # $(TENSOR_PARALLEL_SIZE) from KServe's env
    assert facts.gpus_per_pod == role.gpus_per_pod == 1  # one stage of tensor 1 per pod
    theirs = kserve_pod(obj, mp_runtime())
    assert theirs["errors"] == []
    found = select_runtime(obj, rel)
    assert isinstance(found, Runtime)
    built = merged_pod(obj, found)
    assert not isinstance(built, NoRuntime) and built.worker_container is not None
    for mine, want in (
        (built.container, theirs["head"]["container"]),
        (built.worker_container, theirs["worker"]["container"]),
    ):
        assert mine["command"] == want["command"]
        # Memory as KServe merges it (KServe sets the GPUs of each pod to the tensor size).
        for section in ("requests", "limits"):
            assert mine["resources"][section]["memory"] == want["resources"][section]["memory"]
        assert want["resources"]["limits"]["nvidia.com/gpu"] == "1"
        sizes = {
            e["name"]: e.get("value") for e in mine["env"] if e["name"].endswith("PARALLEL_SIZE")
        }
        assert sizes.items() <= {e["name"]: e.get("value") for e in want["env"]}.items()


def test_kvtiers_writes_land_in_the_head_and_the_worker_pods() -> None:
    """Each pod of the engine gets its share: its own /dev/shm of kvtier's per-pod size (one
    mount, replacing the runtime's 12Gi), memory above the runtime's limit, and the flag in
    the args both vLLM processes read (the head's `vllm serve`, the worker's script passes
    "$@" on to `vllm serve --headless`); the take-back gives KServe the user's service again."""
    obj = multi_node()
    rel = [{**r, "kind": "ServingRuntime"} for r in mp_runtime()]
    offload = _offload()
    decode = _decode_role(offload)
    writes = INFERENCE_SERVICE.writes(obj, decode, None, rel)
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    out = kserve_pod(after, mp_runtime())
    assert out["errors"] == []
    role = decode.roles[0]  # each pod's figures (policy/roles.py gives them in operation)
    for name in ("head", "worker"):
        pod, container = out[name]["pod"], out[name]["container"]
        shm = [m for m in container["volumeMounts"] if m["mountPath"] == SHM_PATH]
        assert len(shm) == 1, name
        [volume] = [v for v in pod["volumes"] if v["name"] == shm[0]["name"]]
        assert quantity_to_bytes(volume["emptyDir"]["sizeLimit"]) == role.shm_bytes
        args = container["args"]
        assert args[args.index(KV_FLAG) + 1] == role.arg, name
        request = quantity_to_bytes(container["resources"]["requests"]["memory"])
        limit = quantity_to_bytes(container["resources"]["limits"]["memory"])
        assert request >= 24 * (1 << 30) + role.pod_memory_bytes and limit >= request
    from tests.unit.test_render_targets import _undone

    back = _undone(after)
    assert back["spec"] == obj["spec"]


def _decode_role(offload: Any) -> Any:
    """The offload with one decode role of two pods, each half the engine's CPU tier (as
    policy/roles.py gives a pipeline of two stages)."""
    from dataclasses import replace

    from kvtier.targets.offload import DECODE, plan_offload
    from tests.unit.test_render_targets import CONNECTOR, GiB

    half = replace(
        plan_offload(CONNECTOR, 128 * GiB, 258 * GiB, 130 * GiB),
        templates=("predictor", "predictor.workerSpec"),
    )
    assert half.role == DECODE
    return replace(offload, roles=(half,))


def test_the_ray_multi_node_runtime_that_drops_the_args_is_refused() -> None:
    """OpenShift AI's Ray-shaped multi-node runtime: its head's script execs vLLM with its own
    flags, so KServe's head pod drops the service's args (the oracle runs it): kvtier refuses
    with FlagNotPassed naming the runtime, instead of a Ready tier whose flag never arrives."""
    obj = multi_node()
    local = runtime_fixture("vllm-multinode-runtime")
    local["metadata"]["namespace"] = NS
    argv = kserve_pod(obj, [local])["head"]["containers"]["kserve-container"]
    assert "--max-model-len=8192" not in argv
    rel = [{**local, "kind": "ServingRuntime"}]
    with pytest.raises(RenderError) as err:
        INFERENCE_SERVICE.writes(obj, _decode_role(_offload()), None, rel)
    assert err.value.reason == "FlagNotPassed"
    assert "ServingRuntime vllm-multinode-runtime" in err.value.message
