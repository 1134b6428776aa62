"""What kvtier reads from a model server object: model, parallelism, replicas, roles, placement.

Pure functions over the object as the API returns it (a dict), one reader per kind.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.policy.server_flags import ServerFlags, server_flags
from kvtier.render.targets import users_part

GPU_RESOURCE = "nvidia.com/gpu"
HF_PREFIXES = ("hf://", "huggingface://")
TP_FLAGS = ("--tensor-parallel-size", "-tp")
MODEL_FLAGS = ("--model",)


@dataclass(frozen=True)
class RoleFacts:
    """One set of vLLM pods of an LLMInferenceService: `decode` (spec.template and
    spec.worker; the only role without spec.prefill) or `prefill` (spec.prefill), with the
    replicas and parallelism KServe (v0.20) deploys it with.

    With spec.worker (or spec.prefill.worker) each replica is a LeaderWorkerSet group of
    `pods_per_replica` pods, KServe's ParallelismSpec.GetSize: data / dataLocal with data
    parallelism, else pipeline. Each vLLM engine (data-parallel rank) holds its own CPU tier.
    """

    role: str
    replicas: int
    tensor: int | None
    pipeline: int = 1
    data: int = 1
    data_local: int = 1
    multi_node: bool = False
    templates: tuple[str, ...] = ("template",)  # paths under spec, dotted
    # The role's own pods: GPUs of its main container and the nodes it selects (placement).
    gpus_per_pod: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)

    @property
    def data_parallel(self) -> bool:
        return self.data > 1 or self.data_local > 1

    @property
    def pods_per_replica(self) -> int:
        if not self.multi_node:
            return 1
        if self.data_parallel:
            return max(self.data // max(self.data_local, 1), 1)
        return self.pipeline

    @property
    def engines_per_pod(self) -> int:
        """vLLM engines (data-parallel ranks) in one pod."""
        return max(self.data // self.pods_per_replica, 1) if self.data_parallel else 1

    @property
    def engines_per_replica(self) -> int:
        return self.engines_per_pod * self.pods_per_replica if self.data_parallel else 1

    @property
    def stages_per_pod(self) -> int:
        """Pipeline stages an engine spreads over pods: each pod holds 1/stages of its tier."""
        return self.pipeline if self.multi_node and not self.data_parallel else 1


@dataclass(frozen=True)
class TargetFacts:
    """The model server as kvtier needs it for sizing."""

    kind: str
    api_version: str
    model_name: str | None  # HF id or catalog key, when the target names one
    tensor_parallel_size: int | None
    replicas: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    gpus_per_pod: int | None = None
    memory_request_bytes: int | None = None
    memory_limit_bytes: int | None = None
    # The vLLM container's CPU-tier flags and version.
    server: ServerFlags = field(default_factory=ServerFlags)
    roles: tuple[RoleFacts, ...] = ()  # LLMInferenceService only


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _model_from_uri(uri: object) -> str | None:
    if not isinstance(uri, str) or not uri:
        return None
    for prefix in HF_PREFIXES:
        if uri.startswith(prefix):
            return uri[len(prefix) :].strip("/") or None
    return None


def _flag(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE` in an argument list."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _bytes(value: object) -> int | None:
    if value is None:
        return None
    try:
        return quantity_bytes(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None


def _resources(container: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    """(GPUs, memory request, memory limit) of a container."""
    limits = _get(container, "resources", "limits") or {}
    requests = _get(container, "resources", "requests") or {}
    gpus = _int(limits.get(GPU_RESOURCE) or requests.get(GPU_RESOURCE))
    return gpus, _bytes(requests.get("memory")), _bytes(limits.get("memory"))


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _container(containers: object, name: str) -> Mapping[str, Any]:
    if isinstance(containers, list):
        for c in containers:
            if isinstance(c, Mapping) and c.get("name") == name:
                return c
        if containers and isinstance(containers[0], Mapping):
            return containers[0]
    return {}


def _args(value: object) -> list[str]:
    return [str(a) for a in value] if isinstance(value, list) else []


def inference_service_facts(obj: Mapping[str, Any]) -> TargetFacts:
    """KServe InferenceService v1beta1 with the vLLM runtime."""
    predictor = _get(obj, "spec", "predictor") or {}
    model = predictor.get("model") or {}
    args = _args(model.get("args"))
    gpus, mem_req, mem_lim = _resources(model)
    min_r = _int(predictor.get("minReplicas"))
    max_r = _int(predictor.get("maxReplicas"))
    replicas = max(r for r in (min_r, max_r, 1) if r is not None)
    return TargetFacts(
        kind="InferenceService",
        api_version=str(obj.get("apiVersion", "serving.kserve.io/v1beta1")),
        model_name=_model_from_uri(model.get("storageUri")) or _flag(args, MODEL_FLAGS),
        tensor_parallel_size=_int(_flag(args, TP_FLAGS)),
        replicas=replicas,
        node_selector=_str_map(predictor.get("nodeSelector")),
        gpus_per_pod=gpus,
        memory_request_bytes=mem_req,
        memory_limit_bytes=mem_lim,
        server=server_flags(model),
    )


def llm_inference_service_facts(obj: Mapping[str, Any]) -> TargetFacts:
    """llm-d LLMInferenceService, v1alpha1 or v1alpha2."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    main = _container(template.get("containers"), "main")
    gpus, mem_req, mem_lim = _resources(main)
    tp = _int(_get(spec, "parallelism", "tensor")) or _flag_tp(main)
    model_name = _model_from_uri(_get(spec, "model", "uri")) or _get(spec, "model", "name")
    # Parts of spec that only kvtier's own fields keep alive are no role (render/targets.py).
    roles = [_role("decode", spec, tp, users_part(obj, "worker"))]
    prefill = spec.get("prefill")
    if isinstance(prefill, Mapping) and users_part(obj, "prefill"):
        roles.append(_role("prefill", prefill, tp, users_part(obj, "prefill.worker")))
    return TargetFacts(
        kind="LLMInferenceService",
        api_version=str(obj.get("apiVersion", "serving.kserve.io/v1alpha2")),
        model_name=model_name if isinstance(model_name, str) and model_name else None,
        tensor_parallel_size=tp,
        replicas=_replicas(spec),
        node_selector=_str_map(template.get("nodeSelector")),
        gpus_per_pod=gpus,
        memory_request_bytes=mem_req,
        memory_limit_bytes=mem_lim,
        server=server_flags(main),
        roles=tuple(roles),
    )


def _flag_tp(main: Mapping[str, Any]) -> int | None:
    """--tensor-parallel-size from the container's args or VLLM_ADDITIONAL_ARGS."""
    extra = [e for e in main.get("env") or [] if isinstance(e, Mapping)]
    extra_args = next(
        (str(e.get("value", "")) for e in extra if e.get("name") == "VLLM_ADDITIONAL_ARGS"), ""
    )
    try:
        env_args = shlex.split(extra_args)
    except ValueError:
        env_args = []
    return _int(_flag(_args(main.get("args")) + env_args, TP_FLAGS))


def _replicas(spec: Mapping[str, Any]) -> int:
    """spec.replicas, or with autoscaling (spec.scaling, exclusive with replicas in KServe's
    schema) the most it scales to, as for an InferenceService's maxReplicas."""
    scaling = spec.get("scaling")
    scaling = scaling if isinstance(scaling, Mapping) else {}
    counts = (spec.get("replicas"), scaling.get("minReplicas"), scaling.get("maxReplicas"))
    return max([n for n in (_int(c) for c in counts) if n is not None] + [1])


def _role(name: str, spec: Mapping[str, Any], tp: int | None, worker: bool) -> RoleFacts:
    """A role from its part of the spec (spec, or spec.prefill); KServe gives prefill its own
    replicas and parallelism, falling back to nothing of decode's but the model."""
    par = spec.get("parallelism")
    par = par if isinstance(par, Mapping) else {}
    if name == "decode":
        templates = ["template"]
    else:
        # KServe's prefill preset supplies the template when prefill names no pods itself.
        has_template = isinstance(spec.get("template"), Mapping) or not worker
        templates = ["prefill.template"] if has_template else []
    if worker:
        templates.append("worker" if name == "decode" else "prefill.worker")
    pod = spec.get(templates[0].rsplit(".", 1)[-1]) if templates else None
    pod = pod if isinstance(pod, Mapping) else {}
    return RoleFacts(
        role=name,
        replicas=_replicas(spec),
        tensor=_int(par.get("tensor")) or (tp if name == "decode" else _prefill_tp(spec)),
        pipeline=max(_int(par.get("pipeline")) or 1, 1),
        data=max(_int(par.get("data")) or 1, 1),
        data_local=max(_int(par.get("dataLocal")) or 1, 1),
        multi_node=worker,
        templates=tuple(templates),
        gpus_per_pod=_resources(_container(pod.get("containers"), "main"))[0],
        node_selector=_str_map(pod.get("nodeSelector")),
    )


def _prefill_tp(prefill: Mapping[str, Any]) -> int | None:
    """Prefill's tensor parallelism without spec.prefill.parallelism.tensor: a flag in its own
    main container, else its GPU count."""
    pods = prefill.get("template") or prefill.get("worker") or {}
    main = _container(pods.get("containers") if isinstance(pods, Mapping) else None, "main")
    return _flag_tp(main) or _resources(main)[0]


def target_facts(obj: Mapping[str, Any]) -> TargetFacts:
    if obj.get("kind") == "InferenceService":
        return inference_service_facts(obj)
    return llm_inference_service_facts(obj)


@dataclass(frozen=True)
class Placement:
    """Where the model server can land, from the nodes it selects."""

    eligible_nodes: tuple[str, ...]
    node_memory_bytes: int | None  # the smallest allocatable memory among them
    pods_per_node: int


# Every tier decides over the same nodes: a placement is kept per (nodes, selector, GPUs)
# while no node changes. A node's uid and resourceVersion name its content; nodes without
# them (built by hand, not read from the API) are never kept.
_PLACEMENTS: dict[tuple[Any, ...], Placement] = {}
PLACEMENTS_KEPT = 256


def placement(
    nodes: Sequence[Mapping[str, Any]], node_selector: Mapping[str, str], gpus_per_pod: int
) -> Placement:
    """Nodes that match the selector and have the GPUs for one model-server pod."""
    versions = tuple(
        (_get(n, "metadata", "uid"), _get(n, "metadata", "resourceVersion")) for n in nodes
    )
    if not all(uid and version for uid, version in versions):
        return _placement(nodes, node_selector, gpus_per_pod)
    key = (versions, tuple(sorted(node_selector.items())), gpus_per_pod)
    kept = _PLACEMENTS.get(key)
    if kept is None:
        kept = _placement(nodes, node_selector, gpus_per_pod)
        if len(_PLACEMENTS) >= PLACEMENTS_KEPT:
            del _PLACEMENTS[next(iter(_PLACEMENTS))]  # the oldest
        _PLACEMENTS[key] = kept
    return kept


def _placement(
    nodes: Sequence[Mapping[str, Any]], node_selector: Mapping[str, str], gpus_per_pod: int
) -> Placement:
    names: list[str] = []
    memories: list[int] = []
    per_node: list[int] = []
    for node in nodes:
        labels = _get(node, "metadata", "labels") or {}
        if any(labels.get(k) != v for k, v in node_selector.items()):
            continue
        allocatable = _get(node, "status", "allocatable") or {}
        gpus = _int(allocatable.get(GPU_RESOURCE)) or 0
        if gpus_per_pod > 0 and gpus < gpus_per_pod:
            continue
        names.append(str(_get(node, "metadata", "name")))
        memory = _bytes(allocatable.get("memory"))
        if memory:
            memories.append(memory)
        per_node.append(max(gpus // gpus_per_pod, 1) if gpus_per_pod > 0 else 1)
    return Placement(
        eligible_nodes=tuple(sorted(names)),
        node_memory_bytes=min(memories) if memories else None,
        pods_per_node=max(per_node) if per_node else 1,
    )
