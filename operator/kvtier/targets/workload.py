"""What the plain apps/v1 kinds share (deployment.py, statefulset.py): a workload whose pod
template runs vLLM, as llm-d's
modelservice chart and vLLM's production-stack chart render them: one pod template at
spec.template, the vLLM container started as `vllm serve MODEL ...` or
`python -m vllm.entrypoints.openai.api_server ...` (in its command, its args, or both).

The container is the one the tier names (spec.targetRef.container), else the one whose
command and args run vLLM, else the only container. The built-in PodSpec merges containers,
volumes, initContainers and env by name and volumeMounts by mountPath, so kvtier's entries go
in a server-side apply; `args` is atomic, so the same apply carries the container's args whole
(the user's, then the flag), guarded by the resourceVersion read (targets/patch.py). vLLM
takes command + args as one argv, so the flag appended to args reaches it. A container that
runs vLLM through a shell script that does not pass its arguments on (no `"$@"`, command.py)
would drop the flag: refused, never reported Applied.

kvtier's own evictor Deployments (label app.kubernetes.io/managed-by=kvtier) are never a
target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.names.labels import MANAGED_BY, MANAGER
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.targets import command
from kvtier.targets import facts as read
from kvtier.targets.base import Conflict, Related, RelatedObjects
from kvtier.targets.facts import TargetFacts, get
from kvtier.targets.offload import Offload
from kvtier.targets.patch import apply_write, pointer
from kvtier.targets.pod import (
    KV_FLAG,
    TOP,
    PodTemplate,
    applied,
    conflict_in_container,
    metadata,
    pod_parts,
    pod_unapply_ops,
    recorded,
    summary,
    template_body,
    unapply_patch,
    user_args,
)
from kvtier.targets.server_flags import server_flags

GROUP = "apps"
CONTAINER_ANNOTATION = "kvcache.io/container"  # which container runs vLLM, when not found
_POD = ("spec", "template", "spec")


def _containers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = get(obj, *_POD, "containers")
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _vllm_index(obj: Mapping[str, Any]) -> int | None:
    """The index of the container that runs vLLM (module docstring), None when none does."""
    containers = _containers(obj)
    named = get(obj, "metadata", "annotations", CONTAINER_ANNOTATION)
    if isinstance(named, str) and named:
        return next((i for i, c in enumerate(containers) if c.get("name") == named), None)
    hits = [i for i, c in enumerate(containers) if command.runs_vllm(c)]
    if hits:
        return hits[0]
    return 0 if len(containers) == 1 else None


def _own(obj: Mapping[str, Any]) -> bool:
    return bool(get(obj, "metadata", "labels", MANAGED_BY) == MANAGER)


def _refuse(obj: Mapping[str, Any]) -> RenderError | None:
    """Why kvtier cannot write this object, or None."""
    kind, name = obj.get("kind"), get(obj, "metadata", "name")
    if _own(obj):
        return RenderError(
            "UnsupportedTarget",
            f"{kind} {name} is kvtier's own ({MANAGED_BY}={MANAGER}); it is never a "
            "model server to write a tier to",
            "TargetFound",
        )
    index = _vllm_index(obj)
    if index is None:
        return RenderError(
            "VLLMContainerNotFound",
            f"{kind} {name}: no container of spec.template runs vLLM (`vllm serve` or "
            f"python -m {command.ENTRYPOINT}); name it with the annotation {CONTAINER_ANNOTATION}",
            "TargetFound",
        )
    container = _containers(obj)[index]
    if command.drops_args(container):
        return RenderError(
            "FlagNotPassed",
            f"{kind} {name}: container {container.get('name')} starts vLLM through a shell "
            f"script that does not pass its arguments on, so kvtier's {KV_FLAG} would never "
            "reach vLLM; start vLLM directly (command: [vllm, serve, MODEL, ...]) or end "
            'the script\'s vLLM command with "$@"',
            "Applied",
        )
    return None


def _pod(obj: Mapping[str, Any]) -> PodTemplate:
    index = _vllm_index(obj)
    containers = _containers(obj)
    where = None if index is None else (*_POD, "containers", str(index))
    container = containers[index] if index is not None else {}
    guard = (
        ()
        if where is None
        else ({"op": "test", "path": pointer([*where, "name"]), "value": container.get("name")},)
    )
    return PodTemplate(
        name=TOP,
        container=container,
        volumes=get(obj, *_POD, "volumes") or [],
        container_path=where,
        container_guard=guard,
        volumes_path=(*_POD, "volumes"),
        init_containers_path=(*_POD, "initContainers"),
        args_path=None if where is None else (*where, "args"),
    )


class Workload:
    """An apps/v1 kind whose pod template is spec.template (a Deployment, a StatefulSet)."""

    group: str = GROUP
    versions: tuple[str, ...] = ("v1",)
    # Built-in kinds: their served schema is Kubernetes' own, granular where kvtier writes.
    schema_advice: str = "the API server's own apps/v1 schema keeps these parts granular"
    reads_picker_configs: bool = False
    reads: tuple[Related, ...] = ()

    kind: str  # each kind's module names its own
    plural: str

    def facts(self, obj: Mapping[str, Any], related: RelatedObjects = None) -> TargetFacts:
        refused = _refuse(obj)
        if refused is not None and refused.condition == "TargetFound":
            raise refused
        pod = _pod(obj)
        container = pod.container
        flags = command.server_args(container)
        gpus, mem_req, mem_lim = read.resources(container)
        replicas = read.as_int(get(obj, "spec", "replicas"))
        return TargetFacts(
            kind=self.kind,
            api_version=str(obj.get("apiVersion", f"{GROUP}/v1")),
            model_name=command.model(container),
            tensor_parallel_size=read.as_int(read.flag(flags, read.TP_FLAGS)),
            replicas=max(replicas if replicas is not None else 1, 1),
            node_selector=read.str_map(get(obj, *_POD, "nodeSelector")),
            gpus_per_pod=gpus,
            memory_request_bytes=mem_req,
            memory_limit_bytes=mem_lim,
            server=server_flags({**container, "args": flags}),
        )

    def scheduler(
        self, obj: Mapping[str, Any], offload: Offload, layout: bool | SchedulerProblem
    ) -> SchedulerSync | SchedulerProblem | None:
        return None  # the router, if any, is not part of the object

    def writes(
        self,
        obj: Mapping[str, Any],
        offload: Offload,
        scheduler: SchedulerSync | SchedulerProblem | None = None,
        related: RelatedObjects = None,
    ) -> list[DesiredWrite] | Conflict:
        refused = _refuse(obj)
        if refused is not None:
            raise refused
        pod = _pod(obj)
        container = pod.container
        own = applied(obj).get("kvTransferConfig")
        where = conflict_in_container(container, own)
        if where is not None:
            return Conflict(
                f"container {container.get('name')} already passes {KV_FLAG} in {where}"
            )
        parts = pod_parts(obj, offload, pod, mount_disk=True)
        if isinstance(parts, Conflict):
            return parts
        record = {**parts.record, "kvTransferConfig": offload.arg}
        if offload.kv_cache_dtype:
            record["kvCacheDtype"] = offload.kv_cache_dtype
        name = container.get("name")
        main = {"name": name, **parts.container, "args": _with_flag(obj, container, own, offload)}
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": self.kind,
            "metadata": metadata(obj, record),
            "spec": {"template": {"spec": template_body(main, parts)}},
        }
        request = record["memoryRequest"]["applied"]
        how = summary(obj, offload, f"args {KV_FLAG}", request)
        carried = (f"spec.template.spec.containers[name={name}].args",)
        return [apply_write(obj, body, how, carried)]

    def unapply(self, obj: Mapping[str, Any]) -> list[DesiredWrite]:
        if not recorded(obj):
            return []
        return unapply_patch(obj, pod_unapply_ops(obj, _pod(obj), applied(obj)))

    def users_part(self, obj: Mapping[str, Any], part: str) -> bool:
        return read.users_part(obj, part)


def _with_flag(
    obj: Mapping[str, Any], container: Mapping[str, Any], own: str | None, offload: Offload
) -> list[str]:
    """The container's args without kvtier's earlier flag, then kvtier's flags."""
    users: Sequence[str] = user_args(obj, container.get("args") or [], own)
    return [*users, *offload.dtype_args, KV_FLAG, offload.arg]
