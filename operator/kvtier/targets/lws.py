"""A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) running vLLM, as llm-d's modelservice
chart renders multi-node vLLM: `spec.replicas` groups of `spec.leaderWorkerTemplate.size`
pods each, the leader from `leaderTemplate` (optional: without it the leader is a worker too)
and the others from `workerTemplate`. LWS's controller builds one StatefulSet of leaders and
one of workers per group from those templates.

Which pods get what. Every pod of a group holds part of the vLLM engine(s) (data-parallel
ranks, or an engine's tensor and pipeline workers spread over the group), and with them its
share of the CPU tier in its own /dev/shm: every pod template gets the memory, /dev/shm and
the disk mount, sized for one pod as the LLMInferenceService kind sizes its leader and worker
templates (policy/roles.py). The flag goes where a vLLM process reads its command line: the
template that starts the engine (the leader's, else the worker's), and a worker template
whose container runs vLLM itself (`vllm serve --headless`, data-parallel ranks); not a worker
that only joins the leader's Ray cluster (`ray start ...`), whose vLLM workers get the config
from the engine and whose command an appended flag would break.

The vLLM container of each template is the one the annotation kvcache.io/container names,
else the one whose command and args run vLLM, else (a worker) the one named like the
leader's, else the only container. LWS's CRD declares the pod templates' lists as the
built-in PodSpec does (containers, volumes, env keyed by name; args atomic), so kvtier's
entries, its record and the flag go in one server-side apply, which carries the args of each
container it adds the flag to whole, guarded by the resourceVersion read; a vLLM started by
a shell script that does not pass its arguments on (command.py) is refused (FlagNotPassed).

Sizing reads the engine template's flags: tensor, pipeline and data parallelism. With data
parallelism each pod runs --data-parallel-size-local engines (data / size when not given);
without it, the engine's workers spread evenly over the group's pods, each holding 1/size of
its CPU tier (one pipeline stage each when --pipeline-parallel-size is the group size).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.names.labels import MANAGED_BY, MANAGER
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.targets import facts as read
from kvtier.targets.base import Conflict, Related, RelatedObjects
from kvtier.targets.command import ENTRYPOINT, drops_args, model, runs_vllm, server_args
from kvtier.targets.facts import RoleFacts, TargetFacts, get, template_path
from kvtier.targets.offload import DECODE, Offload
from kvtier.targets.patch import apply_write, pointer
from kvtier.targets.pod import (
    KV_FLAG,
    PodTemplate,
    applied,
    conflict_in_container,
    file_record,
    metadata,
    pod_parts,
    pod_unapply_ops,
    put_template,
    record_at,
    recorded,
    summary,
    template_body,
    unapply_patch,
    user_args,
)
from kvtier.targets.server_flags import server_flags

GROUP = "leaderworkerset.x-k8s.io"
KIND = "LeaderWorkerSet"
VERSION = "v1"
CONTAINER_ANNOTATION = "kvcache.io/container"
LEADER = "leaderWorkerTemplate.leaderTemplate"
WORKER = "leaderWorkerTemplate.workerTemplate"
_DP_FLAGS = ("--data-parallel-size", "-dp")
_DP_LOCAL_FLAGS = ("--data-parallel-size-local", "-dpl")
_PP_FLAGS = ("--pipeline-parallel-size", "-pp")


# --- the pod templates --------------------------------------------------------------------------


def _templates(obj: Mapping[str, Any]) -> list[str]:
    """The pod templates the object has, the engine's first (the leader's when it has one)."""
    has_leader = isinstance(get(obj, *template_path(LEADER)), Mapping)
    return [LEADER, WORKER] if has_leader else [WORKER]


def _containers(obj: Mapping[str, Any], template: str) -> list[Mapping[str, Any]]:
    found = get(obj, *template_path(template), "spec", "containers")
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _vllm_index(obj: Mapping[str, Any], template: str) -> int | None:
    """The index of the template's vLLM container (module docstring), None when none is."""
    containers = _containers(obj, template)
    named = get(obj, "metadata", "annotations", CONTAINER_ANNOTATION)
    if isinstance(named, str) and named:
        return next((i for i, c in enumerate(containers) if c.get("name") == named), None)
    hits = [i for i, c in enumerate(containers) if runs_vllm(c)]
    if hits:
        return hits[0]
    if template == WORKER and _templates(obj)[0] == LEADER:
        leader = _vllm_index(obj, LEADER)
        if leader is not None:
            name = _containers(obj, LEADER)[leader].get("name")
            same = next((i for i, c in enumerate(containers) if c.get("name") == name), None)
            if same is not None:
                return same
    return 0 if len(containers) == 1 else None


def _engine_template(obj: Mapping[str, Any]) -> str:
    return _templates(obj)[0]


def _takes_flag(obj: Mapping[str, Any], template: str, container: Mapping[str, Any]) -> bool:
    """Whether a vLLM process reads the container's command line (module docstring): the
    engine's template always (as the apps/v1 kinds write their only container), a worker's
    when it runs vLLM, or runs only flags (the image's entrypoint is then vLLM's)."""
    if template == _engine_template(obj) or runs_vllm(container):
        return True
    command = read.str_args(container.get("command"))
    args = read.str_args(container.get("args"))
    return not command and (not args or args[0].startswith("-"))


def _pod(obj: Mapping[str, Any], template: str) -> PodTemplate:
    index = _vllm_index(obj, template)
    pod_spec = (*template_path(template), "spec")
    where = None if index is None else (*pod_spec, "containers", str(index))
    container = _containers(obj, template)[index] if index is not None else {}
    guard = (
        ()
        if where is None
        else ({"op": "test", "path": pointer([*where, "name"]), "value": container.get("name")},)
    )
    return PodTemplate(
        name=template,
        container=container,
        volumes=get(obj, *pod_spec, "volumes") or [],
        container_path=where,
        container_guard=guard,
        volumes_path=(*pod_spec, "volumes"),
        init_containers_path=(*pod_spec, "initContainers"),
        args_path=None if where is None else (*where, "args"),
    )


def _own(obj: Mapping[str, Any]) -> bool:
    return bool(get(obj, "metadata", "labels", MANAGED_BY) == MANAGER)


def _refuse(obj: Mapping[str, Any]) -> RenderError | None:
    """Why kvtier cannot write this object, or None."""
    name = get(obj, "metadata", "name")
    if _own(obj):
        return RenderError(
            "UnsupportedTarget",
            f"{KIND} {name} is kvtier's own ({MANAGED_BY}={MANAGER}); it is never a "
            "model server to write a tier to",
            "TargetFound",
        )
    for template in _templates(obj):
        if _vllm_index(obj, template) is None:
            return RenderError(
                "VLLMContainerNotFound",
                f"{KIND} {name}: no container of spec.{template} runs vLLM (`vllm serve` or "
                f"python -m {ENTRYPOINT}); name it with the annotation {CONTAINER_ANNOTATION}",
                "TargetFound",
            )
    for template in _templates(obj):
        container = _pod(obj, template).container
        if _takes_flag(obj, template, container) and drops_args(container):
            return RenderError(
                "FlagNotPassed",
                f"{KIND} {name}: container {container.get('name')} of spec.{template} starts "
                "vLLM through a shell script that does not pass its arguments on, so kvtier's "
                f"{KV_FLAG} would never reach vLLM; start vLLM directly (command: [vllm, serve, "
                'MODEL, ...]) or end the script\'s vLLM command with "$@"',
                "Applied",
            )
    return None


# --- reading ------------------------------------------------------------------------------------


def _positive(value: str | None) -> int | None:
    found = read.as_int(value)
    return found if found is not None and found > 0 else None


def _role(obj: Mapping[str, Any], flags: list[str], gpus: int | None) -> RoleFacts:
    size = _positive(get(obj, "spec", "leaderWorkerTemplate", "size")) or 1
    groups = read.as_int(get(obj, "spec", "replicas"))
    data = _positive(read.flag(flags, _DP_FLAGS)) or 1
    local = _positive(read.flag(flags, _DP_LOCAL_FLAGS))
    pipeline = _positive(read.flag(flags, _PP_FLAGS)) or 1
    multi_node = size > 1
    if data > 1 and local is None:
        local = max(data // size, 1)
    if multi_node and data == 1 and (local or 1) == 1:
        # The engine's workers spread over the group: each pod holds 1/size of its tier.
        pipeline = size
    engine = _engine_template(obj)
    return RoleFacts(
        role=DECODE,
        replicas=max(groups if groups is not None else 1, 1),
        tensor=read.as_int(read.flag(flags, read.TP_FLAGS)),
        pipeline=pipeline,
        data=data,
        data_local=local or 1,
        multi_node=multi_node,
        templates=tuple(_templates(obj)),
        gpus_per_pod=gpus,
        node_selector=read.str_map(get(obj, *template_path(engine), "spec", "nodeSelector")),
    )


class LeaderWorkerSet:
    kind: str = KIND
    group: str = GROUP
    versions: tuple[str, ...] = (VERSION,)
    plural: str = "leaderworkersets"
    # Its pod templates are corev1.PodTemplateSpecs, whose list markers LWS's CRD keeps.
    schema_advice: str = (
        "install LeaderWorkerSet's own CRD (sigs.k8s.io/lws config/crd/bases), which declares "
        "these parts granular"
    )
    reads_picker_configs: bool = False
    reads: tuple[Related, ...] = ()  # its pods are built from the object alone

    def facts(self, obj: Mapping[str, Any], related: RelatedObjects = None) -> TargetFacts:
        refused = _refuse(obj)
        if refused is not None and refused.condition == "TargetFound":
            raise refused
        container = _pod(obj, _engine_template(obj)).container
        flags = server_args(container)
        gpus, mem_req, mem_lim = read.resources(container)
        role = _role(obj, flags, gpus)
        return TargetFacts(
            kind=KIND,
            api_version=str(obj.get("apiVersion", f"{GROUP}/{VERSION}")),
            model_name=model(container),
            tensor_parallel_size=role.tensor,
            replicas=role.replicas,
            node_selector=role.node_selector,
            gpus_per_pod=gpus,
            memory_request_bytes=mem_req,
            memory_limit_bytes=mem_lim,
            server=server_flags({**container, "args": flags}),
            roles=(role,),
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
        role = next((r for r in offload.role_offloads() if r.role == DECODE), offload.plan)
        own = applied(obj).get("kvTransferConfig")
        record: dict[str, Any] = {"kvTransferConfig": role.arg}
        if offload.kv_cache_dtype:
            record["kvCacheDtype"] = offload.kv_cache_dtype
        spec: dict[str, Any] = {}
        carried: list[str] = []
        request: int | None = None
        for template in _templates(obj):
            pod = _pod(obj, template)
            container = pod.container
            where = conflict_in_container(container, own)
            if where is not None:
                return Conflict(
                    f"container {container.get('name')} of spec.{template} already passes "
                    f"{KV_FLAG} in {where}"
                )
            parts = pod_parts(obj, offload, pod, mount_disk=True, role=role)
            if isinstance(parts, Conflict):
                return parts
            name = container.get("name")
            main = {"name": name, **parts.container}
            if _takes_flag(obj, template, container):
                users = user_args(obj, container.get("args") or [], own)
                main["args"] = [*users, *offload.dtype_args, KV_FLAG, role.arg]
                carried.append(f"spec.{template}.spec.containers[name={name}].args")
            put_template(spec, f"{template}.spec", template_body(main, parts))
            file_record(record, template, parts.record)
            if request is None:
                request = int(parts.record["memoryRequest"]["applied"])
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": metadata(obj, record),
            "spec": spec,
        }
        assert request is not None
        how = summary(obj, offload, f"args {KV_FLAG}", request)
        return [apply_write(obj, body, how, carried)]

    def unapply(self, obj: Mapping[str, Any]) -> list[DesiredWrite]:
        if not recorded(obj):
            return []
        record = applied(obj)
        own = record.get("kvTransferConfig")
        ops: list[dict[str, Any]] = []
        for template in _templates(obj):
            here = dict(record_at(record, template))
            if own is not None:  # the flag's record is the object's: one flag for every pod
                here["kvTransferConfig"] = own
            ops += pod_unapply_ops(obj, _pod(obj, template), here)
        return unapply_patch(obj, ops)

    def users_part(self, obj: Mapping[str, Any], part: str) -> bool:
        return read.users_part(obj, part)


LEADER_WORKER_SET = LeaderWorkerSet()
