"""What kvtier reads from a model server object: model, tensor parallelism, replicas, placement.

Pure functions over the object as the API returns it (a dict), one reader per kind.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtier.api.common import quantity_bytes

GPU_RESOURCE = "nvidia.com/gpu"
HF_PREFIXES = ("hf://", "huggingface://")
TP_FLAGS = ("--tensor-parallel-size", "-tp")
MODEL_FLAGS = ("--model",)


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
    )


def llm_inference_service_facts(obj: Mapping[str, Any]) -> TargetFacts:
    """llm-d LLMInferenceService, v1alpha1 or v1alpha2."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    main = _container(template.get("containers"), "main")
    gpus, mem_req, mem_lim = _resources(main)
    extra = [e for e in main.get("env") or [] if isinstance(e, Mapping)]
    extra_args = next(
        (str(e.get("value", "")) for e in extra if e.get("name") == "VLLM_ADDITIONAL_ARGS"), ""
    )
    try:
        env_args = shlex.split(extra_args)
    except ValueError:
        env_args = []
    tp = _int(_get(spec, "parallelism", "tensor")) or _int(
        _flag(_args(main.get("args")) + env_args, TP_FLAGS)
    )
    model_name = _model_from_uri(_get(spec, "model", "uri")) or _get(spec, "model", "name")
    return TargetFacts(
        kind="LLMInferenceService",
        api_version=str(obj.get("apiVersion", "serving.kserve.io/v1alpha2")),
        model_name=model_name if isinstance(model_name, str) and model_name else None,
        tensor_parallel_size=tp,
        replicas=max(_int(spec.get("replicas")) or 1, 1),
        node_selector=_str_map(template.get("nodeSelector")),
        gpus_per_pod=gpus,
        memory_request_bytes=mem_req,
        memory_limit_bytes=mem_lim,
    )


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
