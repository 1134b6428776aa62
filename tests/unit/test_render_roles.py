"""llm-d roles: prefill/decode and multi-node LLMInferenceServices in KServe v0.20's shapes.

Every pod template that runs vLLM (spec.template, spec.worker, spec.prefill.template,
spec.prefill.worker) gets its role's memory and /dev/shm; each role is sized by its own
replicas and parallelism; taking the tier back gives the user's object back exactly.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.policy.roles import RolePlan, role_input, role_plans
from kvtier.sizing import (
    ConnectorSettings,
    SizingInput,
    kv_transfer_config,
    kv_transfer_config_arg,
    plan,
    resolve_geometry,
)
from kvtier.targets.base import Conflict
from kvtier.targets.facts import RoleFacts
from kvtier.targets.llm_inference_service import V1ALPHA1
from kvtier.targets.offload import Offload, RoleOffload, plan_offload
from kvtier.targets.registry import target_facts, target_patch, unapply_writes

GiB = 1 << 30
QWEN = resolve_geometry(model="Qwen/Qwen3-32B")


def _main(gpus: int, memory: str = "256Gi") -> dict[str, Any]:
    return {
        "name": "main",
        "image": "ghcr.io/llm-d/llm-d-cuda:v0.8.0",
        "resources": {
            "limits": {"nvidia.com/gpu": str(gpus), "memory": memory},
            "requests": {"nvidia.com/gpu": str(gpus), "memory": memory},
        },
        "volumeMounts": [{"name": "chat", "mountPath": "/opt/templates"}],
    }


def _pod(gpus: int) -> dict[str, Any]:
    return {
        "containers": [_main(gpus)],
        "volumes": [{"name": "chat", "configMap": {"name": "chat-templates"}}],
    }


def prefill_decode(api_version: str = "serving.kserve.io/v1alpha2") -> dict[str, Any]:
    """Decode on spec.template (TP 4, 2 replicas), prefill on spec.prefill (TP 2, 4 replicas)."""
    return {
        "apiVersion": api_version,
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {
            "model": {"uri": "hf://Qwen/Qwen3-32B", "name": "Qwen/Qwen3-32B"},
            "replicas": 2,
            "parallelism": {"tensor": 4},
            "template": _pod(4),
            "prefill": {"replicas": 4, "parallelism": {"tensor": 2}, "template": _pod(2)},
        },
    }


def multi_node_dp() -> dict[str, Any]:
    """One replica of 16 data-parallel ranks, 8 per node (KServe's worker-data-parallel)."""
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "dsr1", "namespace": "llm"},
        "spec": {
            "model": {"uri": "hf://Qwen/Qwen3-32B"},
            "replicas": 1,
            "parallelism": {"tensor": 1, "data": 16, "dataLocal": 8},
            "template": _pod(8),
            "worker": _pod(8),
        },
    }


def multi_node_pp() -> dict[str, Any]:
    """Two pipeline stages of TP 8, one per node."""
    obj = multi_node_dp()
    obj["spec"]["parallelism"] = {"tensor": 8, "pipeline": 2}
    return obj


def _inp(**changes: Any) -> SizingInput:
    base: dict[str, Any] = {
        "geometry": QWEN,
        "average_context_tokens": 50_000,
        "concurrent_sessions": 64,
        "tensor_parallel_size": 4,
        "node_memory_bytes": 2048 * GiB,
        "disk_type": "None",
        "vllm_version": "0.33",  # keeps a CPU-only tier in /dev/shm
    }
    return SizingInput(**{**base, **changes})


def _roles(target: dict[str, Any], **changes: Any) -> list[RolePlan]:
    facts = target_facts(target)
    base = _inp(replicas=facts.replicas, tensor_parallel_size=facts.tensor_parallel_size or 1)
    base = SizingInput(**{**base.__dict__, **changes})
    decode = next(r for r in facts.roles if r.role == "decode")
    return role_plans(base, plan(role_input(base, decode)), facts.roles)


def _offload(roles: list[RolePlan]) -> Offload:
    decode = roles[0]
    own = plan_offload(
        decode.plan.connector,
        decode.plan.sizing.cpu_bytes_to_use,
        decode.pod_memory_bytes,
        decode.shm_bytes,
    )
    return Offload(plan=own, roles=tuple(r.offload() for r in roles))


def _ssa(dst: Any, src: Any) -> Any:
    """Server-side apply's merge for the shapes kvtier writes: maps key by key, lists of
    objects by name (containers, volumes, env) or mountPath, other lists replaced."""
    if isinstance(dst, dict) and isinstance(src, dict):
        for key, value in src.items():
            dst[key] = _ssa(dst.get(key), value)
        return dst
    if isinstance(dst, list) and isinstance(src, list) and src and isinstance(src[0], dict):
        key = "name" if "name" in src[0] else "mountPath"
        for item in src:
            same = next((d for d in dst if d.get(key) == item.get(key)), None)
            if same is None:
                dst.append(copy.deepcopy(item))
            else:
                _ssa(same, item)
        return dst
    return copy.deepcopy(src)


def _apply(target: dict[str, Any], offload: Offload) -> dict[str, Any]:
    writes = target_patch(target, offload)
    assert isinstance(writes, list), writes
    out = copy.deepcopy(target)
    for w in writes:
        if w.action == "Patch":
            out = jsonpatch.apply_patch(out, w.body["jsonPatch"])
        else:
            body = {k: v for k, v in w.body.items() if k not in ("apiVersion", "kind")}
            _ssa(out, body)
    return out


def _container(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    node = obj["spec"]
    for key in path:
        node = node[key]
    found: dict[str, Any] = next(c for c in node["containers"] if c["name"] == "main")
    return found


def _undone(target: dict[str, Any]) -> dict[str, Any]:
    undo = unapply_writes(target)
    assert [w.action for w in undo] == ["Patch"]
    patched: dict[str, Any] = jsonpatch.apply_patch(target, undo[0].body["jsonPatch"])
    return patched


# --- what kvtier reads -------------------------------------------------------------------------


def test_roles_read_with_kserves_parallelism() -> None:
    pd = target_facts(prefill_decode()).roles
    assert [(r.role, r.replicas, r.tensor, r.templates) for r in pd] == [
        ("decode", 2, 4, ("template",)),
        ("prefill", 4, 2, ("prefill.template",)),
    ]
    (dp,) = target_facts(multi_node_dp()).roles
    # KServe's ParallelismSpec.GetSize: data / dataLocal pods per LeaderWorkerSet group.
    assert (dp.pods_per_replica, dp.engines_per_pod, dp.engines_per_replica) == (2, 8, 16)
    assert dp.templates == ("template", "worker")
    (pp,) = target_facts(multi_node_pp()).roles
    assert (pp.pods_per_replica, pp.engines_per_pod, pp.stages_per_pod) == (2, 1, 2)


def test_prefill_worker_only_has_no_leader_template() -> None:
    obj = prefill_decode()
    obj["spec"]["prefill"] = {"worker": _pod(2), "parallelism": {"tensor": 2, "pipeline": 2}}
    prefill = target_facts(obj).roles[1]
    assert prefill.templates == ("prefill.worker",)
    # No template of its own and no worker: KServe's preset supplies the template.
    obj["spec"]["prefill"] = {"replicas": 1}
    assert target_facts(obj).roles[1].templates == ("prefill.template",)
    assert target_facts(obj).roles[1].tensor is None


def test_prefill_tensor_falls_back_to_its_own_gpus() -> None:
    obj = prefill_decode()
    del obj["spec"]["prefill"]["parallelism"]
    assert target_facts(obj).roles[1].tensor == 2


# --- sizing per role ---------------------------------------------------------------------------


def test_each_role_is_sized_by_its_own_replicas_and_parallelism() -> None:
    decode, prefill = _roles(prefill_decode())
    per_token = 262_144  # Qwen3-32B, 16-bit KV, whole server
    # 64 sessions over 2 decode engines and over 4 prefill engines.
    assert decode.plan.sizing.working_set_bytes == per_token * 50_000 * 32
    assert prefill.plan.sizing.working_set_bytes == per_token * 50_000 * 16
    assert decode.plan.input.tensor_parallel_size == 4
    assert prefill.plan.input.tensor_parallel_size == 2
    assert prefill.plan.sizing.bytes_per_token_per_rank * 2 == per_token
    assert prefill.plan.disk is None  # prefill: CPU tier only
    status = prefill.status()
    assert status["role"] == "prefill" and status["templates"] == ["spec.prefill.template"]
    assert status["cpuTierBlocks"] == prefill.plan.sizing.cpu_bytes_to_use // (16 * per_token)


def test_data_parallel_pod_holds_every_local_engines_tier() -> None:
    (role,) = _roles(multi_node_dp(), tensor_parallel_size=1)
    cpu = role.plan.sizing.cpu_bytes_to_use
    # 64 sessions over 16 engines; each pod runs 8 of them.
    assert role.plan.sizing.working_set_bytes == 262_144 * 50_000 * 4
    assert role.cpu_bytes_per_pod == 8 * cpu
    assert role.pod_memory_bytes == 2 * 8 * cpu + 4 * GiB
    assert role.shm_bytes == 8 * cpu + 4 * GiB
    assert role.endpoint_cpu_bytes == 16 * cpu  # the leader fronts all 16 engines
    # The node cap is per engine: a pod's share of node memory over its 8 engines.
    capped = _roles(multi_node_dp(), tensor_parallel_size=1, node_memory_bytes=256 * GiB)[0]
    assert capped.cpu_bytes_per_pod * 2 + 4 * GiB <= 128 * GiB


def test_pipeline_stages_split_the_tier_across_pods() -> None:
    (role,) = _roles(multi_node_pp(), tensor_parallel_size=8)
    cpu = role.plan.sizing.cpu_bytes_to_use
    assert role.cpu_bytes_per_pod == -(-cpu // 2)
    assert role.shm_bytes == -(-cpu // 2) + 4 * GiB
    assert role.bytes_per_token_per_rank == role.plan.sizing.bytes_per_token_per_rank // 2
    assert role.endpoint_cpu_bytes == cpu


def test_a_release_without_the_tier_in_shm_sizes_no_shm_on_any_pod() -> None:
    (role,) = _roles(multi_node_pp(), tensor_parallel_size=8, vllm_version="0.24")
    assert role.shm_bytes is None
    after = _apply(multi_node_pp(), _offload([role]))
    for template in ("template", "worker"):
        main = _container(after, template)
        assert all(m["mountPath"] != "/dev/shm" for m in main["volumeMounts"])
        assert main["resources"]["requests"]["memory"] == _gi(256 * GiB + role.pod_memory_bytes)


def test_single_pod_role_matches_the_plain_sizing() -> None:
    obj = prefill_decode()
    del obj["spec"]["prefill"]
    (role,) = _roles(obj)
    assert role.pod_memory_bytes == role.plan.sizing.pod_memory_bytes
    assert role.shm_bytes == role.plan.sizing.shm_bytes


# --- writes ------------------------------------------------------------------------------------


def test_prefill_decode_native_form_sizes_every_role() -> None:
    roles = _roles(prefill_decode())
    decode, prefill = roles
    writes = target_patch(prefill_decode(), _offload(roles))
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]
    spec = writes[0].body["spec"]
    assert spec["kvCacheOffloading"]["cpu"] != spec["prefill"]["kvCacheOffloading"]["cpu"]
    assert "secondary" not in spec["prefill"]["kvCacheOffloading"]
    after = _apply(prefill_decode(), _offload(roles))
    for path, role in ((("template",), decode), (("prefill", "template"), prefill)):
        main = _container(after, *path)
        assert main["resources"]["requests"]["memory"] == _gi(256 * GiB + role.pod_memory_bytes)
        assert {"name": "kvtier-dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
        node = after["spec"]
        for key in path:
            node = node[key]
        dshm = next(v for v in node["volumes"] if v["name"] == "kvtier-dshm")
        assert role.shm_bytes is not None
        assert dshm["emptyDir"]["sizeLimit"] == _gi(role.shm_bytes)
        assert {"name": "chat", "configMap": {"name": "chat-templates"}} in node["volumes"]


def _gi(n: int) -> str:
    from kvtier.render.quantities import to_quantity

    return to_quantity(n)


@pytest.mark.parametrize("load", [prefill_decode, multi_node_dp, multi_node_pp])
@pytest.mark.parametrize("api_version", ["serving.kserve.io/v1alpha2", V1ALPHA1[0]])
def test_every_vllm_template_is_patched_and_given_back(load: Any, api_version: str) -> None:
    original = load()
    original["apiVersion"] = api_version
    roles = _roles(original, tensor_parallel_size=4)
    after = _apply(original, _offload(roles))
    for role in roles:
        for template in role.facts.templates:
            main = _container(after, *template.split("."))
            assert {"name": "kvtier-dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
            if api_version == V1ALPHA1[0]:
                env = {e["name"]: e["value"] for e in main["env"]}
                assert env["VLLM_ADDITIONAL_ARGS"].endswith(f"'{role.offload().arg}'")
    record = json.loads(after["metadata"]["annotations"][APPLIED_ANNOTATION])
    others = {t for r in roles for t in r.facts.templates} - {"template"}
    assert set(record.get("pods", {})) == others
    # A re-render over the result changes nothing; taking the tier back restores all.
    assert _apply(after, _offload(roles)) == after
    assert _undone(after) == original


def test_a_user_flag_in_the_worker_is_a_conflict() -> None:
    obj = multi_node_dp()
    obj["spec"]["worker"]["containers"][0]["args"] = ["--kv-transfer-config", "{}"]
    result = target_patch(obj, _offload(_roles(obj, tensor_parallel_size=1)))
    assert isinstance(result, Conflict)
    assert "spec.worker container main" in result.message


def test_a_foreign_prefill_native_field_is_a_conflict() -> None:
    obj = prefill_decode()
    obj["spec"]["prefill"]["kvCacheOffloading"] = {"cpu": "10Gi"}
    result = target_patch(obj, _offload(_roles(obj)))
    assert isinstance(result, Conflict)
    assert "spec.prefill.kvCacheOffloading" in result.message


def test_offload_without_roles_patches_spec_template_only() -> None:
    obj = multi_node_dp()
    roles = _roles(obj, tensor_parallel_size=1)
    bare = Offload(
        plan_offload(
            roles[0].plan.connector,
            roles[0].plan.sizing.cpu_bytes_to_use,
            roles[0].pod_memory_bytes,
            roles[0].shm_bytes,
        )
    )
    writes = target_patch(obj, bare)
    assert isinstance(writes, list)
    assert set(writes[0].body["spec"]) == {"kvCacheOffloading", "template"}


def test_role_offload_arg_is_the_roles_own_config() -> None:
    """The flag carries the role's own CPU tier: the one figure, with the plan's settings."""
    connector = ConnectorSettings(16, "NVMe")
    role = RoleOffload("prefill", ("prefill.template",), connector, 1, 2, 3, 4, 5)
    assert role.arg == kv_transfer_config_arg(kv_transfer_config(1, 16, "NVMe"))
    assert role.kv_transfer_config["kv_connector_extra_config"]["cpu_bytes_to_use"] == 1
    assert RoleFacts("decode", 1, 4).templates == ("template",)


# --- through decide ----------------------------------------------------------------------------


def _decide(target: dict[str, Any], mode: str = "Apply") -> Any:
    from datetime import UTC, datetime

    from kvtier.policy.contract import Facts
    from kvtier.policy.decide import decide

    tier = {
        "apiVersion": "kvcache.io/v1alpha1",
        "kind": "KVCacheTier",
        "metadata": {"name": "qwen", "namespace": "llm", "generation": 1, "uid": "u1"},
        "spec": {
            "mode": mode,
            "targetRef": {"kind": "LLMInferenceService", "name": "qwen"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
            "disk": {"type": "None"},
        },
    }
    nodes = [
        {
            "metadata": {"name": f"gpu-node-{i}"},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "2Ti"}},
        }
        for i in range(4)
    ]
    now = datetime(2026, 12, 1, tzinfo=UTC)
    from tests.served_schemas import schemas_for

    return decide(Facts(tier, None, target, None, nodes, now, target_schemas=schemas_for(target)))


def test_decide_reports_every_role_and_the_scheduler() -> None:
    from tests.unit.test_render_scheduler import epp_config

    obj = prefill_decode()
    obj["spec"]["router"] = {
        "scheduler": {
            "annotations": {"app.kubernetes.io/version": "0.8.0"},  # a 0.8 picker
            "config": {"inline": epp_config(pd=True)},
        }
    }
    decision = _decide(obj)
    roles = decision.status["plan"]["roles"]
    assert [r["role"] for r in roles] == ["decode", "prefill"]
    assert roles[1]["templates"] == ["spec.prefill.template"] and roles[1]["tensor"] == 2
    scheduler = decision.status["plan"]["scheduler"]
    smallest = min(r["cpuBytesToUse"] for r in roles)  # one engine per endpoint here
    assert scheduler["lruCapacityPerServer"] == smallest // (16 * 262_144)
    synced = next(c for c in decision.status["conditions"] if c["type"] == "SchedulerSynced")
    assert (synced["status"], synced["reason"]) == ("False", "SchedulerSyncing")
    patch = next(w for w in decision.writes if w.action == "Patch")
    assert "/spec/router/scheduler/config/inline/plugins" in json.dumps(patch.body)
    after = jsonpatch.apply_patch(obj, patch.body["jsonPatch"])
    synced = next(c for c in _decide(after).status["conditions"] if c["type"] == "SchedulerSynced")
    assert (synced["status"], synced["reason"]) == ("True", "SchedulerSynced")
    ready = next(c for c in decision.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] != "SchedulerSynced"  # it never decides Ready


def test_decide_unknown_scheduler_config_is_a_condition_not_a_write() -> None:
    from tests.unit.test_render_scheduler import epp_config

    obj = prefill_decode()
    config = epp_config(pd=True)
    config["apiVersion"] = "inference.networking.k8s.io/v2"
    obj["spec"]["router"] = {"scheduler": {"config": {"inline": config}}}
    decision = _decide(obj)
    synced = next(c for c in decision.status["conditions"] if c["type"] == "SchedulerSynced")
    assert (synced["status"], synced["reason"]) == ("False", "SchedulerConfigUnknown")
    assert all(w.action != "Patch" for w in decision.writes)
    assert "scheduler" not in decision.status["plan"]


def _managed(obj: dict[str, Any], *parts: str) -> dict[str, Any]:
    """`obj` with managedFields: argocd owns the spec parts named, kvtier what it wrote."""
    spec: dict[str, Any] = {"f:template": {}}
    for part in parts:
        node = spec
        for key in part.split("."):
            node = node.setdefault(f"f:{key}", {})
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = [
        {
            "manager": "argocd-controller",
            "operation": "Apply",
            "apiVersion": obj["apiVersion"],
            "fieldsV1": {"f:spec": spec},
        },
        {
            "manager": "kvtier-operator",
            "operation": "Apply",
            "apiVersion": obj["apiVersion"],
            "fieldsV1": {"f:spec": {"f:worker": {}, "f:prefill": {"f:template": {}}}},
        },
    ]
    return obj


def test_a_part_only_kvtier_keeps_alive_is_not_written_again() -> None:
    """The user dropped spec.worker and spec.prefill from their manifest; server-side apply
    kept kvtier's fields there. kvtier leaves them out of its apply (which removes them), so
    no worker or prefill role comes back."""
    obj = prefill_decode()
    obj["spec"]["worker"] = _pod(4)
    roles = _roles(obj)
    kept = target_patch(_managed(obj, "worker", "prefill"), _offload(roles))
    assert isinstance(kept, list) and {"worker", "prefill"} <= set(kept[0].body["spec"])
    gone = target_patch(_managed(obj), _offload(roles))
    assert isinstance(gone, list)
    assert set(gone[0].body["spec"]) == {"kvCacheOffloading", "template"}
    record = json.loads(gone[0].body["metadata"]["annotations"][APPLIED_ANNOTATION])
    assert "pods" not in record and "prefillKVCacheOffloading" not in record


def test_decodes_own_data_parallel_flags_count_without_spec_parallelism_data() -> None:
    facts = target_facts(prefill_decode()).roles
    base = _inp(replicas=2, data_parallel_size=2)  # the container's --data-parallel-size 2
    decode, prefill = (role_input(base, r, r.tensor) for r in facts)
    assert (decode.data_parallel_size, decode.replicas) == (2, 2)
    assert prefill.data_parallel_size == 1
    (role,) = role_plans(base, plan(decode), facts[:1])
    assert role.cpu_bytes_per_pod == 2 * role.plan.sizing.cpu_bytes_to_use
    assert role.endpoint_cpu_bytes == 2 * role.plan.sizing.cpu_bytes_to_use


def test_roles_read_only_what_the_user_writes() -> None:
    obj = prefill_decode()
    obj["spec"]["worker"] = _pod(4)
    assert [r.templates for r in target_facts(_managed(obj, "worker", "prefill")).roles] == [
        ("template", "worker"),
        ("prefill.template",),
    ]
    assert [r.templates for r in target_facts(_managed(obj)).roles] == [("template",)]


def test_prefill_is_capped_by_its_own_pods_per_node() -> None:
    nodes = [
        {
            "metadata": {"name": "n0"},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "256Gi"}},
        }
    ]
    obj = prefill_decode()
    obj["spec"]["prefill"] = {"replicas": 8, "parallelism": {"tensor": 1}, "template": _pod(1)}
    facts = target_facts(obj)
    # Decode pods take 4 GPUs (2 per node); prefill pods 1 (8 per node).
    base = _inp(replicas=2, node_memory_bytes=256 * GiB, model_server_pods_per_node=2)
    decode, prefill = role_plans(base, plan(role_input(base, facts.roles[0])), facts.roles, nodes)
    assert prefill.facts.gpus_per_pod == 1
    assert prefill.plan.input.model_server_pods_per_node == 8
    # 0.5 of 256 GiB over 8 pods, less 4 GiB headroom, over the overhead factor 2.
    assert prefill.plan.sizing.cpu_bytes_to_use <= 6 * GiB < decode.plan.sizing.cpu_bytes_to_use


def test_autoscaled_roles_count_the_replicas_they_scale_to() -> None:
    obj = prefill_decode()
    del obj["spec"]["replicas"]
    obj["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 3}
    obj["spec"]["prefill"] = {"scaling": {"minReplicas": 2, "maxReplicas": 6}, "template": _pod(2)}
    facts = target_facts(obj)
    assert facts.replicas == 3
    assert [r.replicas for r in facts.roles] == [3, 6]
