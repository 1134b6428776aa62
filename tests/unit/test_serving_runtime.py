"""The pod KServe builds for an InferenceService from its ServingRuntime (targets/
serving_runtime.py) and what kvtier reads and writes from it (targets/inference_service.py).

The runtimes here are kvtier's own test objects of the shapes KServe and OpenShift AI ship
(KServe v0.20 config/runtimes/kserve-vllmserver.yaml: python entrypoint, memory limit 2Gi,
a sizeless memory emptyDir at /dev/shm; OpenShift AI's vllm-cuda-runtime: a Red Hat image whose
tag is not vLLM's, the release in the annotation opendatahub.io/runtime-version; a multi-node
script that execs vLLM with its own flags). KServe's own merge is the oracle for the merge
itself (test_serving_runtime_oracle.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvtier.names.objects import DSHM_VOLUME
from kvtier.render.result import RenderError
from kvtier.sizing.vllm import SHM_PATH
from kvtier.targets.base import Conflict
from kvtier.targets.command import drops_args, env_args, expand, server_args
from kvtier.targets.inference_service import INFERENCE_SERVICE
from kvtier.targets.pod import applied
from kvtier.targets.registry import unapply_writes
from kvtier.targets.serving_runtime import NoRuntime, Runtime, merged_pod, select_runtime
from kvtier.targets.strategic_merge import merge_container, merge_pod_spec
from tests.unit.test_render_targets import _applied_to, _offload, _patched

GiB = 1 << 30
NS = "team"


def runtime(
    name: str,
    *,
    kind: str = "ClusterServingRuntime",
    fmt: str = "vLLM",
    auto: bool = True,
    priority: int | None = None,
    created: str = "2026-01-01T00:00:00Z",
    container: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": fmt, "autoSelect": auto}
    if priority is not None:
        entry["priority"] = priority
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if kind == "ServingRuntime":
        meta["namespace"] = NS
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": kind,
        "metadata": meta,
        "spec": {
            "supportedModelFormats": [entry],
            "containers": [container or vllm_container()],
            **spec,
        },
    }


def vllm_container(**changes: Any) -> dict[str, Any]:
    """kserve-vllmserver's container, as KServe v0.20 ships it (the parts kvtier reads)."""
    return {
        "name": "kserve-container",
        "image": "vllm/vllm-openai:v0.24.0",
        "command": ["python", "-m", "vllm.entrypoints.openai.api_server"],
        "args": ["--port=8080", "--served-model-name={{.Name}}", "--model=/mnt/models"],
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
        },
        "volumeMounts": [{"name": "devshm", "mountPath": SHM_PATH}],
        **changes,
    }


SHM_VOLUME = {"name": "devshm", "emptyDir": {"medium": "Memory"}}


def isvc(*, runtime_name: str | None = None, **model: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modelFormat": {"name": "vLLM"},
        "storageUri": "hf://meta-llama/Llama-3.1-70B-Instruct",
        "args": ["--tensor-parallel-size", "4"],
        "resources": {"limits": {"nvidia.com/gpu": "4"}},
        **model,
    }
    if runtime_name is not None:
        spec["runtime"] = runtime_name
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llama", "namespace": NS},
        "spec": {"predictor": {"model": spec}},
    }


def chosen(obj: dict[str, Any], runtimes: list[dict[str, Any]]) -> str:
    found = select_runtime(obj, runtimes)
    return found.message if isinstance(found, NoRuntime) else f"{found.kind}/{found.name}"


# --- which runtime ------------------------------------------------------------------------------


def test_a_named_runtime_is_the_namespaces_before_the_clusters() -> None:
    both = [runtime("vllm"), runtime("vllm", kind="ServingRuntime")]
    assert chosen(isvc(runtime_name="vllm"), both) == "ServingRuntime/vllm"
    assert chosen(isvc(runtime_name="vllm"), both[:1]) == "ClusterServingRuntime/vllm"
    assert "not found" in chosen(isvc(runtime_name="other"), both)


def test_a_named_runtime_needs_the_format_but_not_auto_select() -> None:
    assert chosen(isvc(runtime_name="r"), [runtime("r", auto=False)]) == "ClusterServingRuntime/r"
    assert "model format" in chosen(isvc(runtime_name="r"), [runtime("r", fmt="sklearn")])
    assert "disabled" in chosen(isvc(runtime_name="r"), [runtime("r", disabled=True)])


def test_auto_selection_follows_kserves_order() -> None:
    runtimes = [
        runtime("old", created="2025-01-01T00:00:00Z"),
        runtime("new", created="2026-06-01T00:00:00Z"),
        runtime("manual", auto=False),
        runtime("multi", multiModel=True),
    ]
    assert chosen(isvc(), runtimes) == "ClusterServingRuntime/new"  # newest first
    runtimes.append(runtime("preferred", priority=2, created="2024-01-01T00:00:00Z"))
    assert chosen(isvc(), runtimes) == "ClusterServingRuntime/preferred"  # priority first
    runtimes.append(runtime("local", kind="ServingRuntime"))
    assert chosen(isvc(), runtimes) == "ServingRuntime/local"  # the namespace's first
    assert "no runtime supports" in chosen(isvc(), [runtime("x", fmt="sklearn")])


def test_a_multi_node_predictor_takes_a_multi_node_runtime() -> None:
    multi = runtime("multi", workerSpec={"containers": [vllm_container(name="worker-container")]})
    single = runtime("single")
    obj = isvc()
    assert chosen(obj, [multi, single]) == "ClusterServingRuntime/single"
    obj["spec"]["predictor"]["workerSpec"] = {"pipelineParallelSize": 2}
    assert chosen(obj, [multi, single]) == "ClusterServingRuntime/multi"


# --- the merge ---------------------------------------------------------------------------------


def test_strategic_merge_merges_lists_by_their_keys() -> None:
    base = {
        "env": [{"name": "A", "value": "1"}],
        "args": ["x"],
        "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}],
    }
    patch = {
        "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "3"}],
        "args": ["y"],
        "volumeMounts": [{"name": "k", "mountPath": "/dev/shm"}],
    }
    merged = merge_container(base, patch)
    # The patch's items in its order (apimachinery's normalizeElementOrder), A merged.
    assert merged["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "3"}]
    kept = merge_container(
        {"env": [{"name": "X"}, {"name": "A"}, {"name": "Y"}]},
        {"env": [{"name": "A", "value": "1"}, {"name": "N"}]},
    )
    assert [e["name"] for e in kept["env"]] == ["X", "A", "N", "Y"]
    assert merged["args"] == ["y"]  # an atomic list: the patch's
    assert merged["volumeMounts"] == [{"name": "k", "mountPath": "/dev/shm"}]
    pod = merge_pod_spec(
        {"volumes": [SHM_VOLUME], "tolerations": [{"key": "a"}]},
        {"volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "b"}]},
    )
    assert [v["name"] for v in pod["volumes"]] == ["v", "devshm"]
    assert pod["tolerations"] == [{"key": "b"}]
    assert merge_pod_spec(
        {"nodeSelector": {"a": "1"}}, {"nodeSelector": {"a": None, "b": "2"}}
    ) == {"nodeSelector": {"b": "2"}}


def test_the_predictor_container_is_the_runtimes_merged_with_the_models() -> None:
    obj = isvc(env=[{"name": "HF_HUB_OFFLINE", "value": "1"}], runtimeVersion="v0.25.1")
    rt = runtime("kserve-vllmserver", volumes=[SHM_VOLUME], nodeSelector={"gpu": "h100"})
    found = select_runtime(obj, [rt])
    assert isinstance(found, Runtime)
    built = merged_pod(obj, found)
    assert not isinstance(built, NoRuntime)
    c = built.container
    assert c["command"] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert c["args"] == [*rt["spec"]["containers"][0]["args"], "--tensor-parallel-size", "4"]
    assert c["image"] == "vllm/vllm-openai:v0.25.1"  # runtimeVersion sets the tag
    assert c["resources"]["limits"] == {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "4"}
    assert built.pod == {"nodeSelector": {"gpu": "h100"}, "volumes": [SHM_VOLUME]}


# --- what kvtier reads and writes ----------------------------------------------------------------


def test_facts_come_from_the_pod_kserve_builds() -> None:
    env = [{"name": "TENSOR_PARALLEL_SIZE", "value": "8"}]
    rt = runtime(
        "vllm-cuda-runtime",
        kind="ServingRuntime",
        container=vllm_container(
            image="registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.1",
            args=["--port=8080", "--tensor-parallel-size=$(TENSOR_PARALLEL_SIZE)"],
            env=env,
        ),
        annotations={"opendatahub.io/runtime-version": "v0.21.0"},
        nodeSelector={"nvidia.com/gpu.product": "H100"},
    )
    obj = isvc(args=[])
    alone = INFERENCE_SERVICE.facts(obj)
    facts = INFERENCE_SERVICE.facts(obj, [rt])
    assert (alone.tensor_parallel_size, alone.memory_limit_bytes) == (None, None)
    assert facts.tensor_parallel_size == 8  # $(TENSOR_PARALLEL_SIZE) from the runtime's env
    assert facts.memory_limit_bytes == 2 * GiB
    assert facts.server.image_vllm_version == "0.21.0"  # the Red Hat image's runtime says
    assert facts.node_selector == {"nvidia.com/gpu.product": "H100"}


def test_no_runtime_means_no_pod() -> None:
    with pytest.raises(RenderError) as err:
        INFERENCE_SERVICE.facts(isvc(), [])
    assert (err.value.reason, err.value.condition) == ("RuntimeNotFound", "TargetFound")
    assert "no runtime supports model format vLLM" in err.value.message


def test_memory_rises_above_the_runtimes_limit_and_goes_back() -> None:
    rt = runtime("kserve-vllmserver", volumes=[SHM_VOLUME])
    obj = isvc(resources={"limits": {"nvidia.com/gpu": "4"}})
    writes = INFERENCE_SERVICE.writes(obj, _offload(), None, [rt])
    assert not isinstance(writes, Conflict)
    model = writes[-1].body["spec"]["predictor"]["model"]
    limit = model["resources"]["limits"]["memory"]
    request = model["resources"]["requests"]["memory"]
    # The runtime's 2Gi limit would be below the request: kvtier's limit replaces it.
    assert limit == request
    after = _applied_to(obj, writes)
    assert applied(after)["memoryLimit"]["base"] is None  # not the user's: nothing to restore
    undone = _patched(after, unapply_writes(after))
    assert "memory" not in undone["spec"]["predictor"]["model"]["resources"].get("limits", {})
    # A second render from the result changes nothing (the runtime's value is not the user's).
    again = INFERENCE_SERVICE.writes(after, _offload(), None, [rt])
    assert not isinstance(again, Conflict)
    assert again[-1].body["spec"]["predictor"]["model"]["resources"] == model["resources"]


def test_one_shm_mount_replaces_the_runtimes() -> None:
    rt = runtime("kserve-vllmserver", volumes=[SHM_VOLUME])
    obj = isvc()
    writes = INFERENCE_SERVICE.writes(obj, _offload(), None, [rt])
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    found = select_runtime(after, [rt])
    assert isinstance(found, Runtime)
    built = merged_pod(after, found)
    assert not isinstance(built, NoRuntime)
    shm = [m for m in built.container["volumeMounts"] if m["mountPath"] == SHM_PATH]
    assert shm == [{"name": DSHM_VOLUME, "mountPath": SHM_PATH}]
    volume = next(v for v in built.pod["volumes"] if v["name"] == DSHM_VOLUME)
    assert volume["emptyDir"]["sizeLimit"] == "260Gi"


def test_a_users_mount_of_the_runtimes_shm_volume_is_resized_and_given_back() -> None:
    """The user mounts /dev/shm from the runtime's volume (devshm lives in the runtime
    alone): kvtier writes devshm into the predictor with its size, so KServe's merge gives
    one mount of kvtier's size; the take-back removes that copy again (the user never had
    one), and a re-render keeps it recorded as inherited."""
    rt = runtime("kserve-vllmserver", volumes=[SHM_VOLUME])
    obj = isvc(volumeMounts=[{"name": "devshm", "mountPath": SHM_PATH}])
    user = copy.deepcopy(obj["spec"])
    writes = INFERENCE_SERVICE.writes(obj, _offload(), None, [rt])
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    found = select_runtime(after, [rt])
    assert isinstance(found, Runtime)
    built = merged_pod(after, found)
    assert not isinstance(built, NoRuntime)
    assert [m for m in built.container["volumeMounts"] if m["mountPath"] == SHM_PATH] == [
        {"name": "devshm", "mountPath": SHM_PATH}
    ]
    [volume] = [v for v in built.pod["volumes"] if v["name"] == "devshm"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "260Gi"}
    assert applied(after)["shm"]["inherited"] is True
    again = INFERENCE_SERVICE.writes(after, _offload(), None, [rt])
    assert not isinstance(again, Conflict)
    assert applied(_applied_to(after, again))["shm"]["inherited"] is True
    undone = _patched(after, unapply_writes(after))
    assert undone["spec"] == user


def test_a_runtime_script_that_drops_the_args_is_refused_by_name() -> None:
    script = (
        "exec vllm serve /mnt/models --port=8080 --tensor-parallel-size=${TENSOR_PARALLEL_SIZE}"
    )
    dropping = runtime(
        "vllm-multinode-runtime",
        kind="ServingRuntime",
        container=vllm_container(command=["bash", "-c", script], args=[]),
    )
    with pytest.raises(RenderError) as err:
        INFERENCE_SERVICE.writes(isvc(), _offload(), None, [dropping])
    assert (err.value.reason, err.value.condition) == ("FlagNotPassed", "Applied")
    assert "ServingRuntime vllm-multinode-runtime" in err.value.message
    forwarding = copy.deepcopy(dropping)
    forwarding["spec"]["containers"][0]["command"] = ["bash", "-c", script + ' "$@"', "--"]
    assert not isinstance(
        INFERENCE_SERVICE.writes(isvc(), _offload(), None, [forwarding]), Conflict
    )


EVAL_SCRIPT = 'eval "exec vllm serve /mnt/models --port=8080 ${VLLM_ADDITIONAL_ARGS}"'


@pytest.mark.parametrize("runtime_text", [None, "--enable-prefix-caching"])
def test_a_script_that_evaluates_vllm_additional_args_gets_the_flag_there(
    runtime_text: str | None,
) -> None:
    """A runtime whose script drops the args but evaluates VLLM_ADDITIONAL_ARGS into vLLM's
    line: kvtier's flag goes at the end of that env (after the runtime's own text), the
    service's args stay the user's, and the take-back gives the user's service back."""
    ctr = vllm_container(command=["bash", "-c", EVAL_SCRIPT], args=[])
    if runtime_text is not None:
        ctr["env"] = [{"name": "VLLM_ADDITIONAL_ARGS", "value": runtime_text}]
    rt = runtime("vllm-eval", kind="ServingRuntime", container=ctr, volumes=[SHM_VOLUME])
    obj = isvc()
    user = copy.deepcopy(obj["spec"])
    writes = INFERENCE_SERVICE.writes(obj, _offload(), None, [rt])
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    model = after["spec"]["predictor"]["model"]
    assert model["args"] == user["predictor"]["model"]["args"]
    found = select_runtime(after, [rt])
    assert isinstance(found, Runtime)
    built = merged_pod(after, found)
    assert not isinstance(built, NoRuntime)
    [value] = [e["value"] for e in built.container["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"]
    own = applied(after)["kvTransferConfig"]
    assert value == f"{runtime_text or ''} --kv-transfer-config '{own}'".lstrip()
    again = INFERENCE_SERVICE.writes(after, _offload(), None, [rt])
    assert not isinstance(again, Conflict)
    settled = _applied_to(after, again)
    assert settled["spec"] == after["spec"]  # idempotent
    assert applied(settled)["additionalArgs"] == {"base": None}  # still kvtier's entry
    undone = _patched(settled, unapply_writes(settled))
    assert undone["spec"] == user


def test_the_services_own_vllm_additional_args_are_kept_and_given_back() -> None:
    ctr = vllm_container(command=["bash", "-c", EVAL_SCRIPT], args=[])
    rt = runtime("vllm-eval", kind="ServingRuntime", container=ctr)
    obj = isvc(env=[{"name": "VLLM_ADDITIONAL_ARGS", "value": "--max-num-seqs 64"}])
    user = copy.deepcopy(obj["spec"])
    writes = INFERENCE_SERVICE.writes(obj, _offload(), None, [rt])
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    [value] = [
        e["value"]
        for e in after["spec"]["predictor"]["model"]["env"]
        if e["name"] == "VLLM_ADDITIONAL_ARGS"
    ]
    assert value.startswith("--max-num-seqs 64 --kv-transfer-config '")
    assert applied(after)["additionalArgs"] == {"base": "--max-num-seqs 64"}
    undone = _patched(after, unapply_writes(after))
    assert undone["spec"] == user


def test_a_runtime_that_passes_its_own_offload_config_is_a_conflict() -> None:
    rt = runtime("r", container=vllm_container(args=["--kv-transfer-config", "{}"]))
    assert isinstance(INFERENCE_SERVICE.writes(isvc(), _offload(), None, [rt]), Conflict)


def test_the_command_line_as_the_kubelet_runs_it() -> None:
    assert expand("--tp=$(TP)", {"TP": "4"}) == "--tp=4"
    assert expand("--tp=$(UNSET)", {}) == "--tp=$(UNSET)"
    assert drops_args({"command": ["bash", "-c", "exec vllm serve m"]})
    assert not drops_args({"command": ["bash", "-c", "exec vllm serve m $@"]})
    assert not drops_args({"command": ["vllm", "serve", "m"]})
    c = {
        "command": ["bash", "-c", 'exec vllm serve m --max-model-len 4096 "$@"', "--"],
        "args": ["--block-size", "16"],
    }
    assert server_args(c)[:3] == ["m", "--max-model-len", "4096"]
    assert server_args(c)[-2:] == ["--block-size", "16"]


# --- the operator watches the runtimes ---------------------------------------------------------


def test_the_cache_gives_a_target_its_runtimes_and_a_runtime_wakes_its_tiers() -> None:
    from kubernetes import client

    from kvtier.controller.controller import Controller
    from kvtier.controller.watches import on_related, related_watches
    from kvtier.kube.rest import Kube

    assert {(w.api_version, w.kind) for w in related_watches()} == {
        ("serving.kserve.io/v1alpha1", "ServingRuntime"),
        ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
    }
    controller = Controller(Kube(client.ApiClient()))
    cache = controller.cache
    target = isvc()
    assert cache.related_for(target) is None  # the cluster serves no runtime kind: unread
    cache.served = {"ServingRuntime": {"serving.kserve.io/v1alpha1"}}
    assert cache.related_for(target) == []
    tier = {
        "metadata": {"namespace": NS, "name": "t"},
        "spec": {"targetRef": {"kind": "InferenceService", "name": "llama"}},
    }
    cache.set_tier((NS, "t"), tier)
    elsewhere = copy.deepcopy(runtime("other-ns", kind="ServingRuntime"))
    elsewhere["metadata"]["namespace"] = "other"
    on_related(controller, "ADDED", elsewhere)
    assert len(controller.queue) == 0  # another namespace's runtime builds none of its pods
    on_related(controller, "ADDED", runtime("vllm", kind="ServingRuntime"))
    on_related(controller, "ADDED", runtime("cluster-vllm"))
    assert len(controller.queue) == 1
    names = [r["metadata"]["name"] for r in cache.related_for(target) or []]
    assert names == ["cluster-vllm", "vllm"]
    on_related(controller, "DELETED", runtime("vllm", kind="ServingRuntime"))
    assert [r["metadata"]["name"] for r in cache.related_for(target) or []] == ["cluster-vllm"]


def test_the_operator_may_read_the_runtimes_and_nothing_more() -> None:
    from kvtier.generate import target_rules

    rules = [r for r in target_rules() if "servingruntimes" in r["resources"]]
    assert rules == [
        {
            "apiGroups": ["serving.kserve.io"],
            "resources": ["servingruntimes", "clusterservingruntimes"],
            "verbs": ["get", "list", "watch"],
        }
    ]


def test_sized_says_when_the_vllm_release_was_assumed() -> None:
    """The release comes from the tier, the image's tag or the runtime's annotation; when
    none names it, Sized says which default was assumed and how to pin it."""
    from dataclasses import replace

    from kvtier.api.tier import ValueSource
    from kvtier.policy.sizing_input import assumed_release
    from kvtier.settings import Sourced, effective_settings
    from tests.unit.test_effective import _tier

    eff = effective_settings(_tier(), None)
    assert "vLLM 0.24 assumed (kvtier's default)" in assumed_release(eff)
    assert "spec.model.vllmVersion" in assumed_release(eff)
    policy = replace(eff, vllm_version=Sourced("0.33", ValueSource.POLICY))
    assert "vLLM 0.33 assumed (the policy's default)" in assumed_release(policy)
    for known in (ValueSource.TARGET, ValueSource.TIER):
        assert assumed_release(replace(eff, vllm_version=Sourced("0.33", known))) == ""


@pytest.mark.parametrize(
    ("script", "reads"),
    [
        ('eval "exec vllm serve /mnt/models --port 8080 ${VLLM_ADDITIONAL_ARGS}"', True),
        ('eval "exec vllm serve /mnt/models \\\n  --port 8080 \\\n  $VLLM_ADDITIONAL_ARGS"', True),
        (
            'eval "exec python -m vllm.entrypoints.openai.api_server ${VLLM_ADDITIONAL_ARGS:-}"',
            True,
        ),
        # Without eval the shell keeps kvtier's single quotes in the JSON word.
        ("exec vllm serve /mnt/models $VLLM_ADDITIONAL_ARGS", False),
        ('eval "exec vllm serve /mnt/models ${VLLM_ADDITIONAL_ARGS_OLD}"', False),
        ('echo ${VLLM_ADDITIONAL_ARGS}; eval "exec vllm serve /mnt/models"', False),
    ],
)
def test_a_script_that_evaluates_vllm_additional_args_into_vllms_line(
    script: str, reads: bool
) -> None:
    container = {"command": ["bash", "-c", script], "args": []}
    assert drops_args(container)
    assert env_args(container, "VLLM_ADDITIONAL_ARGS") is reads


def test_a_worker_container_kvtier_made_stays_kvtiers_and_goes_back_whole() -> None:
    """A multi-node service with no worker container of its own: kvtier makes one for its
    fields. On the next render it is in the service but still not the user's: the record
    keeps saying so, nothing more is written, and the take-back removes it whole."""
    worker = vllm_container(name="worker-container")
    rt = runtime("multi", workerSpec={"containers": [worker]}, volumes=[SHM_VOLUME])
    obj = isvc()
    obj["spec"]["predictor"]["workerSpec"] = {"pipelineParallelSize": 2}
    writes = INFERENCE_SERVICE.writes(obj, _offload(), None, [rt])
    assert not isinstance(writes, Conflict)
    after = _applied_to(obj, writes)
    made = after["spec"]["predictor"]["workerSpec"]["containers"]
    assert [c["name"] for c in made] == ["worker-container"]
    again = INFERENCE_SERVICE.writes(after, _offload(), None, [rt])
    assert not isinstance(again, Conflict)
    assert _applied_to(after, again) == after  # a second render changes nothing
    undone = _patched(after, unapply_writes(after))
    assert "containers" not in undone["spec"]["predictor"]["workerSpec"], undone
