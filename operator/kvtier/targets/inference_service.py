"""KServe InferenceService v1beta1 with the vLLM runtime: one pod template, the predictor.

KServe builds the predictor's pod from the InferenceService and its ServingRuntime (or
ClusterServingRuntime, serving_runtime.py): kvtier reads the pod as KServe merges it (the
runtime's command, args, image, env, resources and volumes, then the predictor's) and writes
only the InferenceService, where KServe's merge lets kvtier's fields win: its args come after
the runtime's, its /dev/shm mount replaces the runtime's (mounts merge by mountPath), its
memory request and limit replace the runtime's. A runtime whose shell script does not pass
the container's args on would drop kvtier's flag: refused (FlagNotPassed), naming the runtime.
Where the runtimes were not read (an offline plan; a cluster that serves no ServingRuntime
kind, where KServe could build no predictor either) the InferenceService is read alone.

KServe's CRD (v0.20) keeps its own PodSpec copy without listTypes, so `spec.predictor.volumes`,
`spec.predictor.model.args` and `spec.predictor.initContainers` are atomic lists: an apply
replaces them whole, so kvtier's one apply carries each whole, the user's items as read plus
its own, guarded by the resourceVersion read (targets/patch.py). The model container's env,
volumeMounts and resources merge. The flag goes in the model container's args.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvtier.names.objects import EVICTOR_CONTAINER
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.targets import command
from kvtier.targets import facts as read
from kvtier.targets.base import Conflict, Related, RelatedObjects
from kvtier.targets.facts import RoleFacts, TargetFacts, get
from kvtier.targets.offload import DECODE, Offload, RoleOffload
from kvtier.targets.patch import apply_write, carried_list, item_ops, pointer, with_items
from kvtier.targets.pod import (
    KV_FLAG,
    OWN_VOLUMES,
    TOP,
    PodTemplate,
    applied,
    conflict_in_container,
    env,
    file_record,
    metadata,
    own_kv_cache_dtype,
    own_suffix,
    pod_parts,
    pod_unapply_ops,
    record_at,
    recorded,
    strip_own_text,
    summary,
    unapply_patch,
    user_args,
)
from kvtier.targets.server_flags import ADDITIONAL_ARGS_ENV, server_flags
from kvtier.targets.serving_runtime import (
    CLUSTER_SERVING_RUNTIME,
    RUNTIME_API_VERSION,
    RUNTIME_VERSION_ANNOTATION,
    SERVING_RUNTIME,
    WORKER_CONTAINER,
    MergedPod,
    NoRuntime,
    merged_pod,
    select_runtime,
)
from kvtier.targets.strategic_merge import merge_container

GROUP = "serving.kserve.io"
API_VERSION = f"{GROUP}/v1beta1"
KIND = "InferenceService"
_MODEL = ("spec", "predictor", "model")
_VOLUMES = ("spec", "predictor", "volumes")
_ARGS = (*_MODEL, "args")
_INIT = ("spec", "predictor", "initContainers")  # atomic too
_WORKER = ("spec", "predictor", "workerSpec")  # a PodSpec copy: containers, volumes atomic
WORKER_TEMPLATE = "predictor.workerSpec"  # its key in kvtier's record
RUNTIMES = (
    Related(RUNTIME_API_VERSION, SERVING_RUNTIME, "servingruntimes", namespaced=True),
    Related(RUNTIME_API_VERSION, CLUSTER_SERVING_RUNTIME, "clusterservingruntimes", False),
)


class InferenceService:
    kind: str = KIND
    group: str = GROUP
    versions: tuple[str, ...] = ("v1beta1",)
    plural: str = "inferenceservices"
    schema_advice: str = (
        "install KServe's full CRDs (config/crd/full), which declare these parts granular"
    )
    reads_picker_configs: bool = False
    reads: tuple[Related, ...] = RUNTIMES

    def facts(self, obj: Mapping[str, Any], related: RelatedObjects = None) -> TargetFacts:
        predictor = get(obj, "spec", "predictor") or {}
        model = predictor.get("model") or {}
        built = _built(obj, related)
        container = model if built is None else built.container
        pod = predictor if built is None else built.pod
        args = command.server_args(container)
        gpus, mem_req, mem_lim = read.resources(container)
        if built is not None and built.worker_container is not None:
            gpus = int(built.worker["tensorParallelSize"])  # KServe gives each pod a stage
        min_r = read.as_int(predictor.get("minReplicas"))
        max_r = read.as_int(predictor.get("maxReplicas"))
        replicas = max(r for r in (min_r, max_r, 1) if r is not None)
        server = server_flags({**container, "args": args})
        version = (
            None if built is None else built.runtime.annotations.get(RUNTIME_VERSION_ANNOTATION)
        )
        if server.image_vllm_version is None and isinstance(version, str) and version:
            server = replace(server, image_vllm_version=version.removeprefix("v"))
        return TargetFacts(
            kind=KIND,
            api_version=str(obj.get("apiVersion", API_VERSION)),
            model_name=(
                read.model_from_uri(model.get("storageUri")) or read.flag(args, read.MODEL_FLAGS)
            ),
            tensor_parallel_size=read.as_int(read.flag(args, read.TP_FLAGS)),
            replicas=replicas,
            node_selector=read.str_map(pod.get("nodeSelector")),
            gpus_per_pod=gpus,
            memory_request_bytes=mem_req,
            memory_limit_bytes=mem_lim,
            server=server,
            roles=() if built is None else _multi_node_roles(built, replicas),
        )

    def scheduler(
        self, obj: Mapping[str, Any], offload: Offload, layout: bool | SchedulerProblem
    ) -> SchedulerSync | SchedulerProblem | None:
        return None  # no router

    def writes(
        self,
        obj: Mapping[str, Any],
        offload: Offload,
        scheduler: SchedulerSync | SchedulerProblem | None = None,
        related: RelatedObjects = None,
    ) -> list[DesiredWrite] | Conflict:
        return inference_service_patch(obj, offload, _built(obj, related))

    def unapply(self, obj: Mapping[str, Any]) -> list[DesiredWrite]:
        if not recorded(obj):
            return []
        record = applied(obj)
        ops = pod_unapply_ops(obj, _predictor(obj), record)
        worker = record_at(record, WORKER_TEMPLATE)
        if worker:
            ops += _worker_unapply_ops(obj, worker, record.get("kvTransferConfig"))
        return unapply_patch(obj, ops)

    def users_part(self, obj: Mapping[str, Any], part: str) -> bool:
        return read.users_part(obj, part)


def _multi_node_roles(built: MergedPod, replicas: int) -> tuple[RoleFacts, ...]:
    """A multi-node predictor (spec.predictor.workerSpec): one engine over a head pod and
    pipelineParallelSize - 1 worker pods, one pipeline stage each with tensorParallelSize
    GPUs, so each pod holds its stage's share of the CPU tier (policy/roles.py)."""
    if built.worker_container is None:
        return ()
    return (
        RoleFacts(
            role=DECODE,
            replicas=replicas,
            tensor=int(built.worker["tensorParallelSize"]),
            pipeline=int(built.worker["pipelineParallelSize"]),
            multi_node=True,
            templates=("predictor", WORKER_TEMPLATE),
            gpus_per_pod=int(built.worker["tensorParallelSize"]),
            node_selector=read.str_map(built.pod.get("nodeSelector")),
        ),
    )


def _built(obj: Mapping[str, Any], related: RelatedObjects) -> MergedPod | None:
    """The predictor's pod as KServe builds it from its runtime; None when the runtimes were
    not read. RenderError when KServe would build none."""
    if related is None:
        return None
    runtime = select_runtime(obj, related)
    built = runtime if isinstance(runtime, NoRuntime) else merged_pod(obj, runtime)
    if isinstance(built, NoRuntime):
        raise RenderError(
            "RuntimeNotFound",
            f"InferenceService {get(obj, 'metadata', 'name')}: KServe builds no predictor for "
            f"it: {built.message}",
            "TargetFound",
        )
    return built


def _predictor(target: Mapping[str, Any], built: MergedPod | None = None) -> PodTemplate:
    """The predictor's pod: its model container runs vLLM."""
    model = get(target, *_MODEL)
    if not isinstance(model, Mapping):
        raise RenderError(
            "UnsupportedTarget",
            "the InferenceService has no spec.predictor.model (custom predictor containers "
            "are not supported)",
        )
    return PodTemplate(
        name=TOP,
        container=model,
        volumes=get(target, *_VOLUMES) or [],
        container_path=_MODEL,
        container_guard=(),
        volumes_path=_VOLUMES,
        init_containers_path=_INIT,
        args_path=_ARGS,
        inherited=None if built is None else built.runtime_resources,
        inherited_volumes=() if built is None else built.runtime.spec.get("volumes") or (),
    )


def inference_service_patch(
    target: Mapping[str, Any], offload: Offload, built: MergedPod | None = None
) -> list[DesiredWrite] | Conflict:
    """One server-side apply: mounts, env and memory in spec.predictor.model, and the atomic
    spec.predictor.volumes, initContainers and model.args carried whole (the user's items
    kept, kvtier's added), guarded by the resourceVersion read. `built`: the pod KServe
    builds, when known."""
    pod = _predictor(target, built)
    container = pod.container
    own = applied(target).get("kvTransferConfig")
    where = conflict_in_container(container, own)
    if where is not None:
        return Conflict(f"spec.predictor.model already passes {KV_FLAG} in {where}")
    if built is not None:
        runtime = f"{built.runtime.kind} {built.runtime.name}"
        if conflict_in_container(built.runtime_container, None) is not None:
            return Conflict(f"the predictor's runtime {runtime} already passes {KV_FLAG}")
        by_env = command.env_args(built.container, ADDITIONAL_ARGS_ENV)
        if command.drops_args(built.container) and not by_env:
            raise RenderError(
                "FlagNotPassed",
                f"the predictor's runtime {runtime} starts vLLM through a shell script that "
                f"does not pass the InferenceService's args on, so kvtier's {KV_FLAG} would "
                "never reach vLLM; use a runtime that starts vLLM directly or whose script ends "
                'its vLLM command with "$@" (as kserve-huggingfaceserver-multinode does), or '
                f'evaluates ${{{ADDITIONAL_ARGS_ENV}}} into it (eval "exec vllm serve ... '
                f'${{{ADDITIONAL_ARGS_ENV}}}")',
                "Applied",
            )
    role = next((r for r in offload.role_offloads() if r.role == DECODE), None)
    multi_node = built is not None and built.worker_container is not None
    figures = role if multi_node else None
    parts = pod_parts(target, offload, pod, mount_disk=True, role=figures)
    if isinstance(parts, Conflict):
        return parts
    arg = figures.arg if figures is not None else offload.arg
    record = {**parts.record, "kvTransferConfig": arg}
    if built is not None and command.drops_args(built.container):
        # The runtime's script drops the args but evaluates VLLM_ADDITIONAL_ARGS: the flag
        # goes there (after the runtime's or the user's own text), and args stay the user's.
        model, record["additionalArgs"] = _env_flag(target, parts.container, built, arg, offload)
        predictor: dict[str, Any] = {"model": model}
        carried: list[str] = []
        flag_in = ADDITIONAL_ARGS_ENV
    else:
        args = [*user_args(target, container.get("args") or [], own), *offload.dtype_args]
        predictor = {"model": {**parts.container, "args": [*args, KV_FLAG, arg]}}
        carried = [_dotted(_ARGS)]
        flag_in = f"args {KV_FLAG}"
    lists = (
        (_VOLUMES, with_items(pod.volumes, parts.volumes, OWN_VOLUMES)),
        (_INIT, with_items(get(target, *_INIT) or [], parts.init_containers, {EVICTOR_CONTAINER})),
    )
    for path, value in lists:
        whole = carried_list(get(target, *path), value)
        if whole is not None:
            predictor[path[-1]] = whole
            carried.append(_dotted(path))
    if offload.kv_cache_dtype:
        record["kvCacheDtype"] = offload.kv_cache_dtype
    if multi_node and built is not None and figures is not None:
        worker = _worker_spec(target, offload, figures, built, own)
        if isinstance(worker, Conflict):
            return worker
        predictor["workerSpec"] = worker[0]
        carried += [_dotted((*_WORKER, key)) for key in worker[0]]
        file_record(record, WORKER_TEMPLATE, worker[1])
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata(target, record),
        "spec": {"predictor": predictor},
    }
    request = record["memoryRequest"]["applied"]
    how = summary(target, offload, flag_in, request)
    return [apply_write(target, body, how, carried)]


def _env_flag(
    target: Mapping[str, Any],
    container: Mapping[str, Any],
    built: MergedPod,
    arg: str,
    offload: Offload,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model container's fields with kvtier's flags at the end of VLLM_ADDITIONAL_ARGS,
    and the record of the value to give back: the service's own text, or None where the
    value came from the runtime (the take-back removes kvtier's entry, and KServe's merge
    gives the pod the runtime's value again)."""
    own, dtype = applied(target).get("kvTransferConfig"), own_kv_cache_dtype(target)
    mine = env(get(target, *_MODEL) or {}, ADDITIONAL_ARGS_ENV)
    source = mine or env(built.runtime_container, ADDITIONAL_ARGS_ENV)
    text, _ = strip_own_text(str(source.get("value", "")) if source else "", own, dtype)
    # An entry kvtier created stays kvtier's on every later render, whatever text it carries.
    created = (
        "additionalArgs" in applied(target)
        and get(applied(target), "additionalArgs", "base") is None
    )
    base = text if mine and not created else None
    value = f"{text} {own_suffix(arg, offload.kv_cache_dtype)}".lstrip()
    entries = [e for e in container.get("env") or [] if e.get("name") != ADDITIONAL_ARGS_ENV]
    model = {**container, "env": [*entries, {"name": ADDITIONAL_ARGS_ENV, "value": value}]}
    return model, {"base": base}


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _worker_pod(target: Mapping[str, Any], built: MergedPod | None = None) -> PodTemplate:
    """The worker pods' template: the first of spec.predictor.workerSpec.containers (KServe
    merges it with the runtime's worker-container), or none yet."""
    containers = get(target, *_WORKER, "containers") or []
    runtime_worker = (built.runtime.spec.get("workerSpec") if built else None) or {}
    base: Mapping[str, Any] = next(
        (c for c in runtime_worker.get("containers") or [] if c.get("name") == WORKER_CONTAINER),
        {},
    )
    path = (*_WORKER, "containers", "0")
    return PodTemplate(
        name=WORKER_TEMPLATE,
        container=containers[0] if containers else {},
        volumes=get(target, *_WORKER, "volumes") or [],
        container_path=path if containers else None,
        container_guard=(),
        volumes_path=(*_WORKER, "volumes"),
        init_containers_path=(*_WORKER, "initContainers"),
        args_path=(*path, "args"),
        inherited=base.get("resources") if isinstance(base.get("resources"), Mapping) else None,
        inherited_volumes=runtime_worker.get("volumes") or (),
    )


def _worker_spec(
    target: Mapping[str, Any],
    offload: Offload,
    role: RoleOffload,
    built: MergedPod,
    own: str | None,
) -> tuple[dict[str, Any], dict[str, Any]] | Conflict:
    """The worker template's memory, /dev/shm, disk and (where its vLLM reads its own command
    line: `vllm serve --headless` through "$@") the flag, in its atomic containers, volumes
    and initContainers carried whole (the apply's spec.predictor.workerSpec); and the
    template's record."""
    pod = _worker_pod(target, built)
    parts = pod_parts(target, offload, pod, mount_disk=True, role=role)
    if isinstance(parts, Conflict):
        return parts
    item = merge_container(dict(pod.container) or {"name": WORKER_CONTAINER}, parts.container)
    assert built.worker_container is not None
    if command.runs_vllm(built.worker_container) and not command.drops_args(built.worker_container):
        users = user_args(target, pod.container.get("args") or [], own)
        item["args"] = [*users, *offload.dtype_args, KV_FLAG, role.arg]
    lists = {
        "containers": [item, *(get(target, *_WORKER, "containers") or [])[1:]],
        "volumes": with_items(pod.volumes, parts.volumes, OWN_VOLUMES),
        "initContainers": with_items(
            get(target, *_WORKER, "initContainers") or [],
            parts.init_containers,
            {EVICTOR_CONTAINER},
        ),
    }
    spec: dict[str, Any] = {}
    for key, value in lists.items():
        whole = carried_list(get(target, *_WORKER, key), value)
        if whole is not None:
            spec[key] = whole
    record = dict(parts.record)
    # A worker container kvtier made stays kvtier's on later renders (it is in the service
    # now, but not the user's): the take-back removes it whole.
    if not pod.container or record_at(applied(target), WORKER_TEMPLATE).get("createdContainer"):
        record["createdContainer"] = True
    return spec, record


def _worker_unapply_ops(
    target: Mapping[str, Any], record: Mapping[str, Any], own: str | None
) -> list[dict[str, Any]]:
    """The worker template's take-back: a worker container kvtier made goes whole (with
    kvtier's volumes and evictor); in the user's own, kvtier's fields (the flag's record is
    the object's, as on the predictor)."""
    pod = _worker_pod(target)
    if not record.get("createdContainer"):
        here = {**record, **({"kvTransferConfig": own} if own is not None else {})}
        return pod_unapply_ops(target, pod, here)
    containers = get(target, *_WORKER, "containers") or []
    path = [*_WORKER, "containers"]
    ops: list[dict[str, Any]] = []
    if containers and containers[0].get("name") == WORKER_CONTAINER:
        if len(containers) == 1:
            ops += [
                {"op": "test", "path": pointer(path), "value": containers},
                {"op": "remove", "path": pointer(path)},
            ]
        else:
            ops += [
                {"op": "test", "path": pointer([*path, "0"]), "value": containers[0]},
                {"op": "remove", "path": pointer([*path, "0"])},
            ]
    ops += item_ops(target, list(pod.init_containers_path), "name", {EVICTOR_CONTAINER})
    ops += item_ops(target, list(pod.volumes_path), "name", OWN_VOLUMES)
    return ops


INFERENCE_SERVICE = InferenceService()
