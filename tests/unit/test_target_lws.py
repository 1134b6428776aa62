"""A LeaderWorkerSet running vLLM as a target (kvtier/targets/lws.py): the engine's flags read
from the leader's (else the worker's) command line, every pod template sized for its share of
the group's CPU tier, the flag in the args of every pod that starts vLLM and in no other, and
all of it taken back."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.render.quantities import quantity_to_bytes
from kvtier.render.result import RenderError
from kvtier.targets.base import Conflict
from kvtier.targets.lws import CONTAINER_ANNOTATION, LEADER, LEADER_WORKER_SET, WORKER
from kvtier.targets.offload import Offload
from kvtier.targets.registry import target_kind
from kvtier.tiers.base import PerPodClaim
from tests.unit.test_render_roles import _apply, _offload, _roles

GiB = 1024**3
MODEL = "Qwen/Qwen3-32B"
NVME_SPEC = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Ti"}}}
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"  # LWS's pod webhook sets it in every pod of a group


def _vllm(command: list[str], args: list[str] | None = None, gpus: int = 8) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.33.0",
        "command": command,
        "env": [{"name": "HF_HOME", "value": "/data"}],
        "volumeMounts": [{"name": "models", "mountPath": "/data"}],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "256Gi"}},
    }
    if args is not None:
        container["args"] = args
    return container


def _template(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "qwen"}},
        "spec": {
            "nodeSelector": {"gpu": "h100"},
            "containers": list(containers),
            "volumes": [{"name": "models", "emptyDir": {}}],
        },
    }


def _serve(*flags: str) -> list[str]:
    return ["vllm", "serve", MODEL, *flags]


def lws(shape: str = "single") -> dict[str, Any]:
    """One group shape: `single` (one pod), `worker-dp` (llm-d modelservice's multi-node data
    parallelism: workerTemplate only, 16 ranks, 8 per pod), `worker-pp` (a leader and a worker
    of vLLM's multi-node mp executor, one pipeline stage each), `ray` (a leader starting vLLM
    on a Ray cluster its worker joins)."""
    size = 1
    leader: dict[str, Any] | None = None
    if shape == "single":
        worker = _template(
            _vllm(_serve("--tensor-parallel-size", "8"), ["--max-model-len", "32768"])
        )
    elif shape == "worker-dp":
        size = 2
        flags = ["--tensor-parallel-size", "1", "--data-parallel-size", "16"]
        flags += ["--data-parallel-size-local", "8", "--data-parallel-address", LEADER_ADDRESS]
        worker = _template(_vllm(["vllm", "serve"], [MODEL, *flags]))
    elif shape == "worker-pp":
        size = 2
        flags = ["-tp", "8", "-pp", "2", "--nnodes", "2", "--master-addr", LEADER_ADDRESS]
        leader = _template(_vllm(_serve(*flags), ["--node-rank", "0"]))
        worker = _template(_vllm(_serve(*flags), ["--node-rank", "1", "--headless"]))
    elif shape == "ray":
        size = 2
        flags = ["-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray"]
        leader = _template(_vllm(_serve(*flags)))
        worker = _template(_vllm(["ray", "start"], [f"--address={LEADER_ADDRESS}:6379", "--block"]))
    else:
        raise ValueError(shape)
    templates: dict[str, Any] = {"size": size, "workerTemplate": worker}
    if leader is not None:
        templates["leaderTemplate"] = leader
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": templates},
    }


def _with_disk(offload: Offload) -> Offload:
    return replace(offload, disk=PerPodClaim(spec=NVME_SPEC), disk_label="NVMe")


def _pod(obj: dict[str, Any], template: str) -> dict[str, Any]:
    node = obj["spec"]
    for key in template.split("."):
        node = node[key]
    return dict(node["spec"])


def _vllm_of(obj: dict[str, Any], template: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        c for c in _pod(obj, template)["containers"] if c["name"] == "vllm"
    )
    return found


def _flag(container: dict[str, Any]) -> Any:
    args = container.get("args") or []
    if "--kv-transfer-config" not in args:
        return None
    return json.loads(args[args.index("--kv-transfer-config") + 1])


# --- what kvtier reads -------------------------------------------------------------------------


def test_the_registry_writes_a_leaderworkerset_with_its_kind() -> None:
    assert target_kind(lws()) is LEADER_WORKER_SET
    assert LEADER_WORKER_SET.plural == "leaderworkersets"
    assert LEADER_WORKER_SET.group == "leaderworkerset.x-k8s.io"


def test_a_single_pod_group_is_read_like_a_workload() -> None:
    facts = LEADER_WORKER_SET.facts(lws())
    assert (facts.kind, facts.api_version) == ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1")
    assert facts.model_name == MODEL
    assert (facts.tensor_parallel_size, facts.replicas, facts.gpus_per_pod) == (8, 1, 8)
    assert facts.memory_limit_bytes == 256 * GiB
    assert facts.node_selector == {"gpu": "h100"}
    assert facts.server.max_model_len == 32768 and facts.server.image_vllm_version == "0.33.0"
    (role,) = facts.roles
    assert role.templates == (WORKER,) and not role.multi_node
    assert role.pods_per_replica == 1


def test_data_parallel_ranks_spread_over_the_group() -> None:
    (role,) = LEADER_WORKER_SET.facts(lws("worker-dp")).roles
    assert (role.data, role.data_local, role.tensor) == (16, 8, 1)
    assert role.multi_node and role.pods_per_replica == 2 and role.engines_per_pod == 8
    assert role.templates == (WORKER,)
    # Without --data-parallel-size-local each pod runs its share of the ranks.
    obj = lws("worker-dp")
    args = _vllm_of(obj, WORKER)["args"]
    del args[
        args.index("--data-parallel-size-local") : args.index("--data-parallel-size-local") + 2
    ]
    (role,) = LEADER_WORKER_SET.facts(obj).roles
    assert (role.data_local, role.engines_per_pod) == (8, 8)


def test_the_engine_spread_over_the_group_holds_its_tier_per_pod() -> None:
    facts = LEADER_WORKER_SET.facts(lws("worker-pp"))
    (role,) = facts.roles
    assert role.templates == (LEADER, WORKER)
    assert (role.pipeline, role.stages_per_pod, role.pods_per_replica) == (2, 2, 2)
    assert facts.server.pipeline_parallel_size == 2
    (plan,) = _roles(lws("worker-pp"), tensor_parallel_size=8)
    cpu = plan.plan.sizing.cpu_bytes_to_use
    assert plan.cpu_bytes_per_pod == -(-cpu // 2)  # one pipeline stage per pod
    assert plan.shm_bytes == -(-cpu // 2) + 4 * GiB
    (dp,) = _roles(lws("worker-dp"), tensor_parallel_size=1)
    assert dp.cpu_bytes_per_pod == 8 * dp.plan.sizing.cpu_bytes_to_use  # 8 engines per pod


def test_the_vllm_container_is_found_by_name_by_what_it_runs_or_like_the_leaders() -> None:
    obj = lws("ray")
    sidecar = {"name": "log-shipper", "image": "busybox", "args": ["tail", "-f"]}
    _pod(obj, WORKER)["containers"].insert(0, sidecar)  # the worker runs no vLLM itself
    facts = LEADER_WORKER_SET.facts(obj)  # its container named like the leader's
    assert facts.roles[0].templates == (LEADER, WORKER)
    _vllm_of(obj, WORKER)["name"] = "ray-worker"
    with pytest.raises(RenderError) as err:
        LEADER_WORKER_SET.facts(obj)
    assert err.value.reason == "VLLMContainerNotFound"
    assert f"spec.{WORKER}" in err.value.message and CONTAINER_ANNOTATION in err.value.message
    obj["metadata"]["annotations"] = {CONTAINER_ANNOTATION: "ray-worker"}
    with pytest.raises(RenderError):  # the leader has no container of that name
        LEADER_WORKER_SET.facts(obj)


def test_kvtiers_own_leaderworkerset_is_never_a_target() -> None:
    obj = lws()
    obj["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kvtier"}
    with pytest.raises(RenderError) as err:
        LEADER_WORKER_SET.facts(obj)
    assert (err.value.reason, err.value.condition) == ("UnsupportedTarget", "TargetFound")


def test_a_leader_that_starts_vllm_by_a_shell_script_is_refused() -> None:
    obj = lws("worker-pp")
    leader = _vllm_of(obj, LEADER)
    leader["command"], leader["args"] = ["/bin/sh", "-c", "ray start --head && vllm serve m"], []
    with pytest.raises(RenderError) as err:
        LEADER_WORKER_SET.writes(obj, _offload(_roles(lws("worker-pp"), tensor_parallel_size=8)))
    assert (err.value.reason, err.value.condition) == ("FlagNotPassed", "Applied")
    assert f"spec.{LEADER}" in err.value.message
    # A worker that only joins the leader's Ray cluster by a script is no vLLM command line.
    obj = lws("ray")
    worker = _vllm_of(obj, WORKER)
    worker["command"], worker["args"] = ["sh", "-c", "ray start --block --address=$LEADER"], []
    assert isinstance(LEADER_WORKER_SET.writes(obj, _offload(_roles(lws("ray")))), list)


# --- writes ------------------------------------------------------------------------------------


def test_every_pod_that_starts_vllm_gets_the_flag_and_every_pod_its_share() -> None:
    obj = lws("worker-pp")
    (role,) = _roles(obj, tensor_parallel_size=8)
    offload = _with_disk(_offload([role]))
    writes = LEADER_WORKER_SET.writes(obj, offload)
    # One apply: each template's args carried whole, in the container keyed by name, with the
    # record that names the flag in them.
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]
    assert writes[0].carried == tuple(
        f"spec.{t}.spec.containers[name=vllm].args" for t in (LEADER, WORKER)
    )
    after = _apply(obj, offload)
    cpu = role.plan.sizing.cpu_bytes_to_use
    for template in (LEADER, WORKER):
        vllm = _vllm_of(after, template)
        user = _vllm_of(obj, template)
        assert vllm["command"] == user["command"]
        assert vllm["args"][: len(user["args"])] == user["args"]
        assert _flag(vllm)["kv_connector_extra_config"]["cpu_bytes_to_use"] == cpu
        shm = [m for m in vllm["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        assert len(shm) == 1
        pod = _pod(after, template)
        dshm = next(v for v in pod["volumes"] if v["name"] == shm[0]["name"])
        assert quantity_to_bytes(dshm["emptyDir"]["sizeLimit"]) == role.shm_bytes
        limit = quantity_to_bytes(vllm["resources"]["limits"]["memory"])
        assert limit == 256 * GiB + role.pod_memory_bytes
        # Each pod holds its engine workers' share of the disk tier too: its own claim.
        assert {m["mountPath"] for m in vllm["volumeMounts"]} >= {"/data", "/mnt/kv-cache"}
        disk = next(v for v in pod["volumes"] if v["name"] == "kvtier-kv-cache")
        assert disk["ephemeral"]["volumeClaimTemplate"]["spec"] == NVME_SPEC
    body = writes[-1].body
    assert body["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and body["kind"] == "LeaderWorkerSet"
    record = json.loads(body["metadata"]["annotations"][APPLIED_ANNOTATION])
    assert set(record["pods"]) == {LEADER, WORKER}
    # Rendered again from the result: the same write, which the object already holds.
    again = LEADER_WORKER_SET.writes(after, offload)
    assert isinstance(again, list) and [w.body for w in again] == [body]


def test_a_ray_worker_gets_the_memory_and_mounts_but_never_the_flag() -> None:
    obj = lws("ray")
    roles = _roles(obj, tensor_parallel_size=8)
    after = _apply(obj, _offload(roles))
    assert _flag(_vllm_of(after, LEADER)) is not None
    worker = _vllm_of(after, WORKER)
    assert worker["command"] == ["ray", "start"]
    assert worker["args"] == _vllm_of(obj, WORKER)["args"]
    assert any(m["mountPath"] == "/dev/shm" for m in worker["volumeMounts"])
    assert worker["resources"]["limits"]["memory"] != "256Gi"


def test_an_image_entrypoint_worker_gets_the_flag() -> None:
    obj = lws("worker-pp")
    worker = _vllm_of(obj, WORKER)
    del worker["command"]  # vllm/vllm-openai's entrypoint is `vllm serve`
    worker["args"] = ["--model", MODEL, "--headless"]
    after = _apply(obj, _offload(_roles(obj, tensor_parallel_size=8)))
    assert _flag(_vllm_of(after, WORKER)) is not None


@pytest.mark.parametrize("shape", ["single", "worker-dp", "worker-pp", "ray"])
def test_unapply_gives_the_users_leaderworkerset_back(shape: str) -> None:
    obj = lws(shape)
    after = _apply(obj, _with_disk(_offload(_roles(obj, tensor_parallel_size=8))))
    assert after["spec"] != obj["spec"]
    (undo,) = LEADER_WORKER_SET.unapply(after)
    back = jsonpatch.apply_patch(after, undo.body["jsonPatch"])
    assert back["spec"] == obj["spec"]
    assert APPLIED_ANNOTATION not in (back["metadata"].get("annotations") or {})
    assert LEADER_WORKER_SET.unapply(obj) == []


def test_the_users_own_flag_in_a_worker_is_a_conflict() -> None:
    obj = lws("worker-pp")
    _vllm_of(obj, WORKER)["args"] += ["--kv-transfer-config", "{}"]
    found = LEADER_WORKER_SET.writes(obj, _offload(_roles(lws("worker-pp"))))
    assert isinstance(found, Conflict)
    assert f"spec.{WORKER}" in found.message and "args" in found.message


def test_the_write_is_guarded_by_the_generation_read() -> None:
    """The args are carried whole: the apply holds the generation read as its guard, so after
    a concurrent change of the spec it is refused (409) rather than overwriting it."""
    obj = lws("worker-pp")
    obj["metadata"]["generation"] = 11
    writes = LEADER_WORKER_SET.writes(obj, _offload(_roles(obj, tensor_parallel_size=8)))
    assert isinstance(writes, list) and [w.guard for w in writes] == [11]
