"""llm-d's LLMInferenceService (KServe v0.20), v1alpha1 and v1alpha2: pod templates per role.

Every pod template that runs vLLM gets kvtier's fields in its `main` container: spec.template
(and spec.worker with a LeaderWorkerSet) for decode, spec.prefill.template (and
spec.prefill.worker) for prefill, each with its role's figures. Their containers, volumes,
env and volumeMounts are lists keyed by name (or mountPath): server-side apply of kvtier's
entries only.

v1alpha2 has the native `spec.kvCacheOffloading`, v1alpha1 has not, and converting an object
to v1alpha1 drops it. When another manager writes the object as v1alpha1 (its managedFields
entry says so), the native field would vanish on each of their writes, so kvtier writes the
v1alpha1 form (the flag in VLLM_ADDITIONAL_ARGS), which survives both. The native field has
no place for --kv-cache-dtype nor an obj tier: those are written in the v1alpha1 form too.

The router's CPU-tier scorer (`spec.router.scheduler.config.inline.plugins`, an atomic list)
is kept in step by a guarded JSON patch after the apply (render/scheduler.py).
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from typing import Any

from kvtier.render.quantities import to_quantity
from kvtier.render.result import DesiredWrite
from kvtier.render.scheduler import (
    CAPACITY,
    PLUGINS_PATH,
    SchedulerProblem,
    SchedulerSync,
    restored_plugins,
    scheduler_sync,
)
from kvtier.targets import facts as read
from kvtier.targets.base import Conflict, Related, RelatedObjects
from kvtier.targets.facts import (
    RoleFacts,
    TargetFacts,
    by_key,
    foreign_versions,
    get,
    template_path,
    users_part,
)
from kvtier.targets.offload import DECODE, PREFILL, Offload, RoleOffload
from kvtier.targets.patch import apply_write, json_patch, list_ops, pointer, value_ops
from kvtier.targets.pod import (
    KV_FLAG,
    OBJECT_STORE_ENV,
    TOP,
    PodTemplate,
    applied,
    conflict_in_container,
    env,
    evictor_sidecar,
    file_record,
    metadata,
    own_kv_cache_dtype,
    own_suffix,
    pod_parts,
    pod_unapply_ops,
    put_template,
    record_at,
    recorded,
    strip_own_text,
    summary,
    template_body,
    unapply_patch,
)
from kvtier.targets.server_flags import ADDITIONAL_ARGS_ENV, server_flags
from kvtier.tiers.base import Claim, SharedClaim

GROUP = "serving.kserve.io"
KIND = "LLMInferenceService"
V1ALPHA1 = (f"{GROUP}/v1alpha1", KIND)
V1ALPHA2 = (f"{GROUP}/v1alpha2", KIND)
MAIN_CONTAINER = "main"
# kvtier's record key for the native field of each role, and where the field lives.
_NATIVE = {
    DECODE: ("kvCacheOffloading", ("spec",)),
    PREFILL: ("prefillKVCacheOffloading", ("spec", "prefill")),
}
# Where KServe mounts a v1alpha2 object's first native fs tier in the pods it renders.
_NATIVE_VOLUME = "kv-cache-secondary-0"
_NATIVE_MOUNT = "/mnt/kv-cache-0"


class LLMInferenceService:
    kind: str = KIND
    group: str = GROUP
    versions: tuple[str, ...] = ("v1alpha2", "v1alpha1")
    plural: str = "llminferenceservices"
    schema_advice: str = (
        "install KServe's full CRDs (config/crd/full), which declare these parts granular"
    )
    reads_picker_configs: bool = True
    reads: tuple[Related, ...] = ()

    def facts(self, obj: Mapping[str, Any], related: RelatedObjects = None) -> TargetFacts:
        return llm_inference_service_facts(obj)

    def scheduler(
        self, obj: Mapping[str, Any], offload: Offload, layout: bool | SchedulerProblem
    ) -> SchedulerSync | SchedulerProblem | None:
        return scheduler_sync(obj, offload.role_offloads(), applied(obj), layout)

    def writes(
        self,
        obj: Mapping[str, Any],
        offload: Offload,
        scheduler: SchedulerSync | SchedulerProblem | None = None,
        related: RelatedObjects = None,
    ) -> list[DesiredWrite] | Conflict:
        return llmisvc_patch(obj, offload, scheduler)

    def unapply(self, obj: Mapping[str, Any]) -> list[DesiredWrite]:
        return llmisvc_unapply(obj)

    def users_part(self, obj: Mapping[str, Any], part: str) -> bool:
        return users_part(obj, part)


# --- reading ------------------------------------------------------------------------------------


def llm_inference_service_facts(obj: Mapping[str, Any]) -> TargetFacts:
    """llm-d LLMInferenceService, v1alpha1 or v1alpha2."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    main = read.named_container(template.get("containers"), MAIN_CONTAINER)
    gpus, mem_req, mem_lim = read.resources(main)
    tp = read.as_int(get(spec, "parallelism", "tensor")) or _flag_tp(main)
    model_name = read.model_from_uri(get(spec, "model", "uri")) or get(spec, "model", "name")
    # Parts of spec that only kvtier's own fields keep alive are no role (facts.users_part).
    roles = [_role("decode", spec, tp, users_part(obj, "worker"))]
    prefill = spec.get("prefill")
    if isinstance(prefill, Mapping) and users_part(obj, "prefill"):
        roles.append(_role("prefill", prefill, tp, users_part(obj, "prefill.worker")))
    return TargetFacts(
        kind=KIND,
        api_version=str(obj.get("apiVersion", V1ALPHA2[0])),
        model_name=model_name if isinstance(model_name, str) and model_name else None,
        tensor_parallel_size=tp,
        replicas=_replicas(spec),
        node_selector=read.str_map(template.get("nodeSelector")),
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
        (str(e.get("value", "")) for e in extra if e.get("name") == ADDITIONAL_ARGS_ENV), ""
    )
    try:
        env_args = shlex.split(extra_args)
    except ValueError:
        env_args = []
    return read.as_int(read.flag(read.str_args(main.get("args")) + env_args, read.TP_FLAGS))


def _replicas(spec: Mapping[str, Any]) -> int:
    """spec.replicas, or with autoscaling (spec.scaling, exclusive with replicas in KServe's
    schema) the most it scales to, as for an InferenceService's maxReplicas."""
    scaling = spec.get("scaling")
    scaling = scaling if isinstance(scaling, Mapping) else {}
    counts = (spec.get("replicas"), scaling.get("minReplicas"), scaling.get("maxReplicas"))
    return max([n for n in (read.as_int(c) for c in counts) if n is not None] + [1])


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
    main = read.named_container(pod.get("containers"), MAIN_CONTAINER)
    return RoleFacts(
        role=name,
        replicas=_replicas(spec),
        tensor=read.as_int(par.get("tensor")) or (tp if name == "decode" else _prefill_tp(spec)),
        pipeline=max(read.as_int(par.get("pipeline")) or 1, 1),
        data=max(read.as_int(par.get("data")) or 1, 1),
        data_local=max(read.as_int(par.get("dataLocal")) or 1, 1),
        multi_node=worker,
        templates=tuple(templates),
        gpus_per_pod=read.resources(main)[0],
        node_selector=read.str_map(pod.get("nodeSelector")),
    )


def _prefill_tp(prefill: Mapping[str, Any]) -> int | None:
    """Prefill's tensor parallelism without spec.prefill.parallelism.tensor: a flag in its own
    main container, else its GPU count."""
    pods = prefill.get("template") or prefill.get("worker") or {}
    main = read.named_container(
        pods.get("containers") if isinstance(pods, Mapping) else None, MAIN_CONTAINER
    )
    return _flag_tp(main) or read.resources(main)[0]


# --- the pod templates --------------------------------------------------------------------------


def _pod(target: Mapping[str, Any], template: str) -> PodTemplate:
    """One pod template by its dotted path under spec: its `main` container runs vLLM."""
    path = template_path(template)
    containers = get(target, *path, "containers") or []
    index = next((i for i, c in enumerate(containers) if c.get("name") == MAIN_CONTAINER), None)
    where = None if index is None else (*path, "containers", str(index))
    guard = () if where is None else (_test(pointer([*where, "name"]), MAIN_CONTAINER),)
    return PodTemplate(
        name=template,
        container=by_key(containers, "name", MAIN_CONTAINER),
        volumes=get(target, *path, "volumes") or [],
        container_path=where,
        container_guard=guard,
        volumes_path=(*path, "volumes"),
        init_containers_path=(*path, "initContainers"),
    )


def _test(path: str, value: str) -> dict[str, Any]:
    return {"op": "test", "path": path, "value": value}


def _pod_templates(target: Mapping[str, Any], offload: Offload) -> list[tuple[RoleOffload, str]]:
    """(role, pod template) for every pod template that runs vLLM: spec.template always (as
    before roles), the others when the user's object has them."""
    out = []
    for role in offload.role_offloads():
        for template in role.templates:
            if template == TOP or users_part(target, template):
                out.append((role, template))
    return out


def _holder(template: str) -> str:
    where = "" if template == TOP else f"spec.{template} "
    return f"{where}container {MAIN_CONTAINER}"


# --- writing ------------------------------------------------------------------------------------


def llmisvc_v1alpha1_patch(
    target: Mapping[str, Any], offload: Offload, scheduler: Mapping[str, Any] | None = None
) -> list[DesiredWrite] | Conflict:
    """llm-d LLMInferenceService in its v1alpha1 form: in every pod template that runs vLLM,
    the role's flag appended to env VLLM_ADDITIONAL_ARGS of the `main` container (JSON
    single-quoted), volumes in the template's volumes (keyed by name). Also used for a
    v1alpha2 object that others write as v1alpha1, where the native field would not survive."""
    record_read = applied(target)
    spec: dict[str, Any] = {}
    record: dict[str, Any] = {}
    if offload.kv_cache_dtype:
        record["kvCacheDtype"] = offload.kv_cache_dtype
    for role, template in _pod_templates(target, offload):
        pod = _pod(target, template)
        container = pod.container
        rec = record_at(record_read, template)
        own = rec.get("kvTransferConfig")
        where = conflict_in_container(container, own)
        if where is not None:
            return Conflict(f"{_holder(template)} already passes {KV_FLAG} in {where}")
        parts = pod_parts(target, offload, pod, mount_disk=role.role == DECODE, role=role)
        if isinstance(parts, Conflict):
            return parts
        found = env(container, ADDITIONAL_ARGS_ENV)
        user_text, _ = strip_own_text(
            str(found.get("value", "")) if found else "", own, own_kv_cache_dtype(target)
        )
        value = f"{user_text} {own_suffix(role.arg, offload.kv_cache_dtype)}".lstrip()
        own_env = parts.container.get("env", [])
        keys = [e for e in own_env if e["name"] in OBJECT_STORE_ENV]
        main = {
            "name": MAIN_CONTAINER,
            **parts.container,
            # Keys before the flags that name them: Kubernetes expands $(VAR) in a value only
            # from variables listed earlier (server-side apply keeps this order).
            "env": [
                *keys,
                {"name": ADDITIONAL_ARGS_ENV, "value": value},
                *(e for e in own_env if e["name"] not in OBJECT_STORE_ENV),
            ],
        }
        put_template(spec, template, template_body(main, parts))
        # An env kvtier created holds only its flag: still no user value on a re-render.
        created = get(rec, "additionalArgs", "base") is None and "additionalArgs" in rec
        base = user_text if found and not (created and not user_text) else None
        part = {**parts.record, "kvTransferConfig": role.arg, "additionalArgs": {"base": base}}
        file_record(record, template, part)
    if scheduler:
        record["scheduler"] = dict(scheduler)
    body = {
        "apiVersion": V1ALPHA1[0],
        "kind": V1ALPHA1[1],
        "metadata": metadata(target, record),
        "spec": spec,
    }
    request = record["memoryRequest"]["applied"]
    return [apply_write(target, body, summary(target, offload, ADDITIONAL_ARGS_ENV, request))]


def _native_secondary(disk: Claim) -> dict[str, Any]:
    if isinstance(disk, SharedClaim):
        return {"fileSystem": {"pvc": {"ref": {"name": disk.name}}}}
    return {"fileSystem": {"pvc": {"spec": copy.deepcopy(dict(disk.spec))}}}


def llmisvc_v1alpha2_patch(
    target: Mapping[str, Any], offload: Offload, scheduler: Mapping[str, Any] | None = None
) -> list[DesiredWrite] | Conflict:
    """llm-d LLMInferenceService v1alpha2: the native kvCacheOffloading of each role (spec and
    spec.prefill: KServe writes the flag and mounts the disk tier itself, on leader and worker
    pods); kvtier adds memory, /dev/shm and the seed in every pod template of the role, which
    the native field does not cover. The disk tier serves decode; prefill has a CPU tier."""
    record_read = applied(target)
    spec: dict[str, Any] = {}
    record: dict[str, Any] = {}
    for role in offload.role_offloads():
        key, where = _NATIVE[role.role]
        if role.role == PREFILL and not users_part(target, PREFILL):
            continue
        if get(target, *where, "kvCacheOffloading") is not None and not record_read.get(key):
            return Conflict(
                f"{'.'.join(where)}.kvCacheOffloading is already set by another manager"
            )
        native: dict[str, Any] = {
            "cpu": to_quantity(role.cpu_bytes),
            "evictionPolicy": offload.eviction_policy,
        }
        if offload.disk is not None and role.role == DECODE:
            native["secondary"] = [_native_secondary(offload.disk)]
        node = spec
        for part_key in where[1:]:
            node = node.setdefault(part_key, {})
        node["kvCacheOffloading"] = native
        record[key] = True
    for role, template in _pod_templates(target, offload):
        pod = _pod(target, template)
        found = conflict_in_container(pod.container, None)
        if found is not None:
            return Conflict(f"{_holder(template)} already passes {KV_FLAG} in {found}")
        parts = pod_parts(target, offload, pod, mount_disk=False, role=role)
        if isinstance(parts, Conflict):
            return parts
        if role.role == DECODE:  # the pods KServe mounts the native disk tier in
            parts.init_containers += evictor_sidecar(offload, _NATIVE_VOLUME, _NATIVE_MOUNT)
        main = {"name": MAIN_CONTAINER, **parts.container}
        put_template(spec, template, template_body(main, parts))
        file_record(record, template, parts.record)
    if scheduler:
        record["scheduler"] = dict(scheduler)
    body = {
        "apiVersion": V1ALPHA2[0],
        "kind": V1ALPHA2[1],
        "metadata": metadata(target, record),
        "spec": spec,
    }
    request = record["memoryRequest"]["applied"]
    how = summary(target, offload, "spec.kvCacheOffloading", request)
    return [apply_write(target, body, how)]


def llmisvc_form(target: Mapping[str, Any], offload: Offload | None = None) -> tuple[str, str]:
    """The LLMInferenceService version kvtier writes: v1alpha2 (the native field) unless the
    object is v1alpha1, another manager writes it as v1alpha1, or kvtier must pass
    --kv-cache-dtype (the native field has no place for it: the flags go in
    VLLM_ADDITIONAL_ARGS)."""
    version = (str(target.get("apiVersion", "")), str(target.get("kind", "")))
    if version == V1ALPHA1 or V1ALPHA1[0] in foreign_versions(target):
        return V1ALPHA1
    # KServe's native field has file system secondary tiers only: any other (vLLM's obj tier,
    # on a bucket) goes in the flag.
    secondary = offload.plan.connector.secondary_type if offload is not None else None
    if offload is not None and (offload.kv_cache_dtype or secondary not in (None, "fs")):
        return V1ALPHA1
    return version


def llmisvc_patch(
    target: Mapping[str, Any],
    offload: Offload,
    scheduler: SchedulerSync | SchedulerProblem | None = None,
) -> list[DesiredWrite] | Conflict:
    """The apply of the form llmisvc_form chooses, then the scheduler's plugins list when
    `scheduler` syncs it, or a Conflict.

    The apply carries kvtier's record of the scheduler's user values before the patch
    changes them, so a patch that fails leaves nothing unrecorded."""
    # A config in a ConfigMap is written there (render/scheduler_configmap.py), not here.
    inline = isinstance(scheduler, SchedulerSync) and scheduler.configmap is None
    sync = scheduler if isinstance(scheduler, SchedulerSync) and inline else None
    record: Mapping[str, Any] | None = sync.record if sync else None
    give_back = None
    saved = applied(target).get("scheduler")
    if sync is None and isinstance(saved, Mapping):
        # kvtier no longer keeps the inline config in step (the picker's version moved, the
        # scorer went, the config moved to a ConfigMap): the user's values go back, and the
        # record stays until they are, so a patch that fails loses nothing.
        give_back = restored_plugins(target, saved)
        record = saved if give_back is not None else None
    if llmisvc_form(target, offload) == V1ALPHA1:
        writes = llmisvc_v1alpha1_patch(target, offload, record)
    else:
        writes = llmisvc_v1alpha2_patch(target, offload, record)
    if isinstance(writes, Conflict):
        return writes
    if give_back is not None:
        plugin = saved.get("plugin") if isinstance(saved, Mapping) else None
        ops = list_ops(target, PLUGINS_PATH, give_back)
        what = f"scheduler plugin {plugin}: the user's values back (no longer kept in step)"
        return [*writes, *json_patch(target, ops, what)]
    if sync is None:
        return writes
    ops = list_ops(target, PLUGINS_PATH, sync.plugins)
    what = (
        f"scheduler plugin {sync.plugin}: {CAPACITY} {sync.capacity} (blocks of "
        f"{sync.block_size_tokens} tokens), autoTune false, beside the user's plugins"
    )
    return [*writes, *json_patch(target, ops, what)]


# --- the take-back ------------------------------------------------------------------------------


def llmisvc_unapply(target: Mapping[str, Any]) -> list[DesiredWrite]:
    """kvtier's fields out of every pod template it patched (its record says which), its
    native fields removed, the scheduler's CPU-tier scorer parameters given back."""
    if not recorded(target):
        return []
    record = applied(target)
    pods = record.get("pods")
    others = list(pods) if isinstance(pods, Mapping) else []
    ops: list[dict[str, Any]] = []
    for template in (TOP, *others):
        ops += pod_unapply_ops(target, _pod(target, template), record_at(record, template))
    for key, where in _NATIVE.values():
        if record.get(key) and get(target, *where, "kvCacheOffloading") is not None:
            ops += value_ops(target, [*where, "kvCacheOffloading"], None)
    saved = record.get("scheduler")
    plugins = restored_plugins(target, saved) if isinstance(saved, Mapping) else None
    if plugins is not None:
        ops += list_ops(target, PLUGINS_PATH, plugins)
    return unapply_patch(target, ops)


LLM_INFERENCE_SERVICE = LLMInferenceService()
