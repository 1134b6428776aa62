"""What kvtier reads from a model server object: the facts sizing needs, and the readers every
target kind shares.

Pure functions over the object as the API returns it (a dict). Each kind's `facts()` builds
a TargetFacts from them; `users_part` says which parts of an object are the user's, from its
managedFields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.names import FIELD_MANAGER
from kvtier.targets.server_flags import ServerFlags

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


# --- readers ------------------------------------------------------------------------------------


def get(obj: Any, *path: str) -> Any:
    """The value at `path` (list items by their index as a string), else None."""
    for key in path:
        if isinstance(obj, dict):  # what the API's JSON is: a Mapping's check costs more
            obj = obj.get(key)
        elif isinstance(obj, list):
            if not (key.isdigit() and int(key) < len(obj)):
                return None
            obj = obj[int(key)]
        elif isinstance(obj, Mapping):
            obj = obj.get(key)
        else:
            return None
    return obj


def by_key(items: Sequence[Mapping[str, Any]] | None, key: str, value: str) -> Mapping[str, Any]:
    """The first item whose `key` is `value`, else {}."""
    return next((i for i in items or [] if i.get(key) == value), {})


def template_path(template: str) -> list[str]:
    """The JSON path of a pod template named by its dotted path under spec."""
    return ["spec", *template.split(".")]


def model_from_uri(uri: object) -> str | None:
    if not isinstance(uri, str) or not uri:
        return None
    for prefix in HF_PREFIXES:
        if uri.startswith(prefix):
            return uri[len(prefix) :].strip("/") or None
    return None


def flag(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE` in an argument list."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def as_int(value: object) -> int | None:
    """An integer or a string of digits, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def as_bytes(value: object) -> int | None:
    """A quantity in bytes, else None."""
    if value is None:
        return None
    try:
        return quantity_bytes(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None


def resources(container: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    """(GPUs, memory request, memory limit) of a container."""
    limits = get(container, "resources", "limits") or {}
    requests = get(container, "resources", "requests") or {}
    gpus = as_int(limits.get(GPU_RESOURCE) or requests.get(GPU_RESOURCE))
    return gpus, as_bytes(requests.get("memory")), as_bytes(limits.get("memory"))


def str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def named_container(containers: object, name: str) -> Mapping[str, Any]:
    """The container of that name, else the first one, else {}."""
    if isinstance(containers, list):
        for c in containers:
            if isinstance(c, Mapping) and c.get("name") == name:
                return c
        if containers and isinstance(containers[0], Mapping):
            return containers[0]
    return {}


def str_args(value: object) -> list[str]:
    return [str(a) for a in value] if isinstance(value, list) else []


# --- managedFields: which parts are the user's --------------------------------------------------


def _fields_of(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    fields = entry.get("fieldsV1")
    return fields if isinstance(fields, Mapping) else {}


def _foreign_entries(target: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """managedFields entries of other managers for the main resource (not status)."""
    entries = get(target, "metadata", "managedFields") or []
    return [
        e
        for e in entries
        if isinstance(e, Mapping)
        and e.get("manager") != FIELD_MANAGER
        and e.get("subresource") in (None, "")
    ]


def without_unread_entries(target: dict[str, Any]) -> dict[str, Any]:
    """The target without the managedFields entries nothing here reads: kvtier's own and
    those of subresources (on a target kvtier wrote, most of its decoded managedFields). They
    go only while a kept entry records fields, so `users_part` answers as before. Changed in
    place; returned."""
    meta = target.get("metadata")
    if not isinstance(meta, dict) or not isinstance(entries := meta.get("managedFields"), list):
        return target
    foreign = _foreign_entries(target)
    if len(foreign) < len(entries) and any(_fields_of(e) for e in foreign):
        meta["managedFields"] = foreign
    return target


def foreign_versions(target: Mapping[str, Any]) -> set[str]:
    """The API versions other managers write the object in (their managedFields)."""
    return {str(e.get("apiVersion")) for e in _foreign_entries(target) if e.get("apiVersion")}


def users_part(target: Mapping[str, Any], part: str) -> bool:
    """Whether the part of spec at the dotted path `part` (spec.worker, spec.prefill, ...) is
    there because someone other than kvtier writes it. One that only kvtier's own fields keep
    alive (its owner dropped it from their manifest: server-side apply keeps the fields of the
    other managers) is not the user's any more, and writing it again would bring back a
    worker or a prefill role they removed. Objects whose managedFields record nothing (built
    by hand, or stripped as backup and restore tools leave them) are taken as they are."""
    if not isinstance(get(target, *template_path(part)), Mapping):
        return False
    entries = get(target, "metadata", "managedFields") or []
    if not any(_fields_of(e) for e in entries if isinstance(e, Mapping)):
        return True
    path = ["f:spec", *(f"f:{key}" for key in part.split("."))]
    return any(isinstance(get(_fields_of(e), *path), Mapping) for e in _foreign_entries(target))
