"""A plain Deployment / StatefulSet running vLLM as a target (kvtier/targets/deployment.py,
statefulset.py, workload.py): the vLLM container found by what it runs, its flags read from
command and args, one guarded apply of kvtier's fields by name that carries the args whole
with the flag, and all of it taken back."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.render.result import RenderError
from kvtier.sizing import ConnectorSettings
from kvtier.targets.base import Conflict
from kvtier.targets.command import runs_vllm
from kvtier.targets.deployment import DEPLOYMENT
from kvtier.targets.offload import Offload, plan_offload
from kvtier.targets.statefulset import STATEFUL_SET
from kvtier.targets.workload import CONTAINER_ANNOTATION
from kvtier.tiers.base import PerPodClaim

GiB = 1024**3
CONNECTOR = ConnectorSettings(16, "NVMe")
NVME_SPEC = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Ti"}}}


def deployment(
    command: list[str] | None = None, args: list[str] | None = None, kind: str = "Deployment"
) -> dict[str, Any]:
    """The shape vLLM's production-stack chart renders: a sidecar beside the vLLM container."""
    vllm: dict[str, Any] = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.24.0",
        "resources": {"limits": {"nvidia.com/gpu": "4", "memory": "64Gi"}},
        "env": [{"name": "HF_HOME", "value": "/data"}],
        "volumeMounts": [{"name": "models", "mountPath": "/data"}],
    }
    if command is not None:
        vllm["command"] = command
    if args is not None:
        vllm["args"] = args
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "llama", "namespace": "llm", "labels": {"app": "llama"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "llama"}},
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {
                    "nodeSelector": {"gpu": "h100"},
                    "containers": [
                        {"name": "log-shipper", "image": "busybox", "args": ["tail", "-f"]},
                        vllm,
                    ],
                    "volumes": [{"name": "models", "emptyDir": {}}],
                },
            },
        },
    }


SERVE = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4"]
ENTRYPOINT = ["python3", "-m", "vllm.entrypoints.openai.api_server"]


def offload(**changes: Any) -> Offload:
    base: dict[str, Any] = {
        "plan": plan_offload(CONNECTOR, 128 * GiB, 260 * GiB, 130 * GiB),
        "disk": PerPodClaim(spec=NVME_SPEC),
        "disk_label": "NVMe",
    }
    return Offload(**{**base, **changes})


@pytest.mark.parametrize(
    "command,args",
    [
        (SERVE, None),  # production-stack: everything in command
        (["vllm"], SERVE[1:]),  # command the program, args the rest
        (None, SERVE),  # the image's entrypoint, args from `vllm`
        (ENTRYPOINT, ["--model", SERVE[2], "-tp", "4"]),  # the python entrypoint
    ],
)
def test_facts_read_the_model_and_parallelism_from_command_and_args(
    command: list[str] | None, args: list[str] | None
) -> None:
    facts = DEPLOYMENT.facts(deployment(command, args))
    assert (facts.kind, facts.api_version) == ("Deployment", "apps/v1")
    assert facts.model_name == "meta-llama/Llama-3.1-70B-Instruct"
    assert facts.tensor_parallel_size == 4
    assert facts.replicas == 2
    assert facts.gpus_per_pod == 4
    assert facts.memory_limit_bytes == 64 * GiB
    assert facts.node_selector == {"gpu": "h100"}
    assert facts.server.image_vllm_version == "0.24.0"


def test_the_vllm_container_is_found_by_what_it_runs_or_by_name() -> None:
    assert runs_vllm({"command": SERVE}) and runs_vllm({"command": ENTRYPOINT})
    assert not runs_vllm({"command": ["tail", "-f"]})
    obj = deployment(None, ["--model", "x"])  # nothing says vLLM: two containers
    with pytest.raises(RenderError) as err:
        DEPLOYMENT.facts(obj)
    assert err.value.reason == "VLLMContainerNotFound" and CONTAINER_ANNOTATION in err.value.message
    obj["metadata"]["annotations"] = {CONTAINER_ANNOTATION: "vllm"}
    assert DEPLOYMENT.facts(obj).model_name == "x"


def test_kvtiers_own_deployment_is_never_a_target() -> None:
    obj = deployment(SERVE)
    obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "kvtier"
    with pytest.raises(RenderError) as err:
        DEPLOYMENT.facts(obj)
    assert (err.value.reason, err.value.condition) == ("UnsupportedTarget", "TargetFound")
    with pytest.raises(RenderError):
        DEPLOYMENT.writes(obj, offload())


def test_a_shell_script_that_drops_the_args_is_refused() -> None:
    obj = deployment(["/bin/sh", "-c", "exec vllm serve model"])
    with pytest.raises(RenderError) as err:
        DEPLOYMENT.writes(obj, offload())
    assert (err.value.reason, err.value.condition) == ("FlagNotPassed", "Applied")


def _merged(obj: dict[str, Any], writes: list[Any]) -> dict[str, Any]:
    """The object after a server-side apply of kvtier's fields (keyed lists merged by their
    keys, as the built-in PodSpec declares them; the atomic args replaced whole)."""
    out = copy.deepcopy(obj)
    for w in writes:
        if w.action == "Patch":
            out = jsonpatch.apply_patch(out, w.body["jsonPatch"])
    body = writes[-1].body
    out["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
    pod, mine = out["spec"]["template"]["spec"], body["spec"]["template"]["spec"]
    for field, key in (("volumes", "name"), ("initContainers", "name")):
        for item in mine.get(field, []):
            have = pod.setdefault(field, [])
            same = next((i for i in have if i[key] == item[key]), None)
            have.append(copy.deepcopy(item)) if same is None else same.update(item)
    (main,) = mine["containers"]
    target = next(c for c in pod["containers"] if c["name"] == main["name"])
    for field, key in (("env", "name"), ("volumeMounts", "mountPath")):
        for item in main.get(field, []):
            have = target.setdefault(field, [])
            if not any(i[key] == item[key] for i in have):
                have.append(copy.deepcopy(item))
    for section, values in main["resources"].items():
        target.setdefault("resources", {}).setdefault(section, {}).update(values)
    if "lifecycle" in main:
        target["lifecycle"] = copy.deepcopy(main["lifecycle"])
    if "args" in main:
        target["args"] = copy.deepcopy(main["args"])
    return out


@pytest.mark.parametrize("workload", [DEPLOYMENT, STATEFUL_SET], ids=lambda w: w.kind)
def test_writes_put_the_flag_in_args_and_the_rest_by_name(workload: Any) -> None:
    obj = deployment(SERVE, ["--max-model-len", "131072"], kind=workload.kind)
    obj["metadata"]["generation"] = 7
    writes = workload.writes(obj, offload())
    assert isinstance(writes, list)
    assert [w.action for w in writes] == ["Apply"]  # one write
    # The atomic args carried whole in the container keyed by name, guarded by the generation
    # read: after a concurrent change of the spec the write is not sent (409).
    assert writes[0].carried == ("spec.template.spec.containers[name=vllm].args",)
    assert writes[0].guard == 7
    after = _merged(obj, writes)
    vllm = after["spec"]["template"]["spec"]["containers"][1]
    assert vllm["command"] == SERVE
    assert vllm["args"][:2] == ["--max-model-len", "131072"]
    flag = json.loads(vllm["args"][vllm["args"].index("--kv-transfer-config") + 1])
    assert flag["kv_connector_extra_config"]["cpu_bytes_to_use"] == 128 * GiB
    mounts = [m for m in vllm["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert len(mounts) == 1
    assert vllm["resources"]["limits"]["memory"] == f"{64 + 260}Gi"
    assert {m["mountPath"] for m in vllm["volumeMounts"]} >= {"/data", "/mnt/kv-cache"}
    sidecar = after["spec"]["template"]["spec"]["containers"][0]
    assert sidecar == obj["spec"]["template"]["spec"]["containers"][0]
    body = writes[-1].body
    assert body["apiVersion"] == "apps/v1" and body["kind"] == workload.kind
    assert APPLIED_ANNOTATION in body["metadata"]["annotations"]
    # Rendered again from the result: the same write, which the object already holds.
    again = workload.writes(after, offload())
    assert [w.body for w in again] == [body]


def test_unapply_gives_the_users_deployment_back() -> None:
    obj = deployment(SERVE, ["--max-model-len", "131072"])
    writes = DEPLOYMENT.writes(obj, offload())
    assert isinstance(writes, list)
    after = _merged(obj, writes)
    (undo,) = DEPLOYMENT.unapply(after)
    back = jsonpatch.apply_patch(after, undo.body["jsonPatch"])
    assert back["spec"] == obj["spec"]
    assert APPLIED_ANNOTATION not in (back["metadata"].get("annotations") or {})
    assert DEPLOYMENT.unapply(obj) == []


def test_the_users_own_flag_is_a_conflict() -> None:
    obj = deployment([*SERVE, "--kv-transfer-config", "{}"])
    found = DEPLOYMENT.writes(obj, offload())
    assert isinstance(found, Conflict) and "command" in found.message
