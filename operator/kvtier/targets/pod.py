"""What every target kind does to one pod template that runs vLLM (the kinds say where their
templates and the vLLM container are; this module writes and takes back kvtier's fields).

Values that are not kvtier's alone are overwritten and recorded: the memory request/limit,
the size of a /dev/shm volume the user already had, and the env value VLLM_ADDITIONAL_ARGS
of an LLMInferenceService written as v1alpha1. The record (annotation kvcache.io/applied)
says what the user had and what kvtier wrote, so that

- a re-render adds the tier to the user's value, not to its own previous result;
- kvtier tells its own --kv-transfer-config from one the user passes (a conflict);
- the take-back (`pod_unapply_ops`, `unapply_patch`) puts the user's values back.

Memory: request = the user's request (else their limit, which Kubernetes would copy into the
request, else 0) + sizing.pod_memory_bytes. Limit = the user's limit + pod_memory_bytes when
they set one, never below the new request; no limit when they set none, because adding a cap
the server never had could OOM-kill it for memory unrelated to the tier.

Ephemeral claim templates carry no labels: KServe's schema has no properties for
`volumeClaimTemplate.metadata` and prunes them (the claims bind by the spec's selector).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvtier.names.objects import DSHM_VOLUME, EVICTOR_CONTAINER, KV_CACHE_VOLUME
from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.render.evictor import nvme_evictor_sidecar
from kvtier.render.quantities import quantity_to_bytes, to_quantity
from kvtier.render.result import DesiredWrite
from kvtier.sizing.vllm import ACCESS_KEY_ENV, SECRET_KEY_ENV, SHM_FILES, SHM_PATH
from kvtier.targets.base import Conflict
from kvtier.targets.facts import by_key, get
from kvtier.targets.offload import DECODE, DTYPE_FLAG, Offload, RoleOffload
from kvtier.targets.patch import item_ops, json_patch, list_ops, value_ops
from kvtier.targets.server_flags import ADDITIONAL_ARGS_ENV
from kvtier.tiers.base import PerPodClaim

KV_FLAG = "--kv-transfer-config"
KV_FLAGS = (KV_FLAG, "--kv_transfer_config")  # vLLM accepts both spellings
OBJECT_STORE_ENV = (ACCESS_KEY_ENV, SECRET_KEY_ENV)
HASH_SEED_ENV = "PYTHONHASHSEED"
STALE_SHM_HOOK: Mapping[str, Any] = {"exec": {"command": ["/bin/sh", "-c", f"rm -f {SHM_FILES}"]}}
OWN_VOLUMES = {DSHM_VOLUME, KV_CACHE_VOLUME}
TOP = "template"  # the pod template whose record is the top of kvtier's record


@dataclass(frozen=True)
class PodTemplate:
    """One pod template that runs vLLM, as its kind finds it in the target: the vLLM
    container and the pod's volumes as read, and where they are for the take-back."""

    name: str  # its key in kvtier's record: TOP, else its dotted path under spec
    container: Mapping[str, Any]  # the vLLM container ({} when there is none)
    volumes: Sequence[Mapping[str, Any]]
    # The JSON path of the container, and ops that check the path still names it; None when
    # the template has no vLLM container any more.
    container_path: tuple[str, ...] | None
    container_guard: tuple[Mapping[str, Any], ...]
    volumes_path: tuple[str, ...]
    init_containers_path: tuple[str, ...]
    # The container's args when kvtier's flag is in them (an atomic list); None when the
    # flag is in env VLLM_ADDITIONAL_ARGS.
    args_path: tuple[str, ...] | None = None
    # The resources the pod gets where the container sets none (an InferenceService's from
    # its ServingRuntime): memory is sized from them, never recorded as the user's.
    inherited: Mapping[str, Any] | None = None
    # The volumes the pod gets from elsewhere (its ServingRuntime's), which the container's
    # mounts may name.
    inherited_volumes: Sequence[Mapping[str, Any]] = ()


# --- kvtier's record on the target --------------------------------------------------------------


def applied(target: Mapping[str, Any]) -> dict[str, Any]:
    """kvtier's record on the target; {} when it never applied (or the record is garbled)."""
    text = get(target, "metadata", "annotations", APPLIED_ANNOTATION)
    try:
        record = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def recorded(target: Mapping[str, Any]) -> bool:
    """Whether kvtier left its record (even a garbled one) on the target."""
    annotations = get(target, "metadata", "annotations") or {}
    return bool(applied(target)) or APPLIED_ANNOTATION in annotations


def record_at(record: Mapping[str, Any], template: str) -> Mapping[str, Any]:
    """The record of one pod template: spec.template's (and an InferenceService's) at the
    top of kvtier's record, as before roles existed; the others under `pods`."""
    if template == TOP:
        return record
    return get(record, "pods", template) or {}


def file_record(record: dict[str, Any], template: str, part: Mapping[str, Any]) -> None:
    """File one pod template's record where record_at finds it."""
    if template == TOP:
        record.update(part)
    else:
        record.setdefault("pods", {})[template] = dict(part)


def own_kv_cache_dtype(target: Mapping[str, Any]) -> str | None:
    """The --kv-cache-dtype kvtier itself passes to the target (by its record), if any: the
    target's own flags are the others."""
    value = applied(target).get("kvCacheDtype")
    return value if isinstance(value, str) else None


def metadata(target: Mapping[str, Any], record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The apply's metadata: the target's name and namespace, and kvtier's record."""
    meta = target.get("metadata") or {}
    out: dict[str, Any] = {"name": meta["name"], "namespace": meta["namespace"]}
    if record is not None:
        text = json.dumps(record, separators=(",", ":"), sort_keys=True)
        out["annotations"] = {APPLIED_ANNOTATION: text}
    return out


def env(container: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    entry = by_key(container.get("env"), "name", name)
    return entry or None


# --- --kv-transfer-config in args and in VLLM_ADDITIONAL_ARGS -----------------------------------


def strip_own_args(args: Sequence[str], own: str | None) -> tuple[list[str], bool]:
    """The args without kvtier's `--kv-transfer-config <own>` pair, and whether a flag of
    someone else remains."""
    kept: list[str] = []
    foreign = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in KV_FLAGS and own is not None and i + 1 < len(args) and args[i + 1] == own:
            i += 2
            continue
        if arg in KV_FLAGS or arg.startswith(tuple(f"{f}=" for f in KV_FLAGS)):
            foreign = True
        kept.append(arg)
        i += 1
    return kept, foreign


def without_pair(args: Sequence[str], flag: str, value: str | None) -> list[str]:
    """The args without the first `flag value` pair: kvtier's own, by its record."""
    kept = list(args)
    for i in range(len(kept) - 1):
        if value is not None and kept[i] == flag and kept[i + 1] == value:
            return kept[:i] + kept[i + 2 :]
    return kept


def user_args(target: Mapping[str, Any], args: Sequence[str], own: str | None) -> list[str]:
    """The user's own args: without kvtier's flag pair and its --kv-cache-dtype pair."""
    kept, _ = strip_own_args(args, own)
    return without_pair(kept, DTYPE_FLAG, own_kv_cache_dtype(target))


def own_suffix(own: str, dtype: str | None = None) -> str:
    """kvtier's flags at the end of VLLM_ADDITIONAL_ARGS."""
    # VLLM_ADDITIONAL_ARGS is split by a shell: single quotes keep the JSON one word.
    return (f"{DTYPE_FLAG} {dtype} " if dtype else "") + f"{KV_FLAG} '{own}'"


def strip_own_text(text: str, own: str | None, dtype: str | None = None) -> tuple[str, bool]:
    """VLLM_ADDITIONAL_ARGS without kvtier's suffix, and whether a foreign flag remains."""
    if own is not None and text.endswith(own_suffix(own, dtype)):
        text = text[: -len(own_suffix(own, dtype))].rstrip()
    elif own is not None and text.endswith(own_suffix(own)):
        text = text[: -len(own_suffix(own))].rstrip()
    return text, any(flag in text for flag in KV_FLAGS)


def conflict_in_container(container: Mapping[str, Any], own: str | None) -> str | None:
    """Where the container passes its own --kv-transfer-config, if anywhere."""
    for field_name in ("command", "args"):
        _, foreign = strip_own_args(container.get(field_name) or [], own)
        if foreign:
            return f"its {field_name}"
    found = env(container, ADDITIONAL_ARGS_ENV)
    if found is not None:
        if "valueFrom" in found:
            return f"env {ADDITIONAL_ARGS_ENV} (from valueFrom, which kvtier cannot extend)"
        _, foreign = strip_own_text(str(found.get("value", "")), own)
        if foreign:
            return f"env {ADDITIONAL_ARGS_ENV}"
    return None


# --- memory and /dev/shm ------------------------------------------------------------------------


def _user_value(current: Any, record: Mapping[str, Any] | None) -> Any:
    """The user's value: the recorded base while the field still holds what kvtier wrote,
    else the current value (the user changed it since, or kvtier never wrote it)."""
    if record and current is not None and quantity_to_bytes(current) == record.get("applied"):
        return record.get("base")
    return current


@dataclass(frozen=True)
class Memory:
    request: int
    limit: int | None
    record: dict[str, Any]


def memory_for(
    resources: Mapping[str, Any] | None,
    add: int,
    applied: Mapping[str, Any],
    inherited: Mapping[str, Any] | None = None,
) -> Memory:
    """New memory request/limit (see the module docstring) and the record to store. Where
    the container sets no value, the one it inherits counts (a ServingRuntime's limit of 2Gi
    would otherwise stay below the new request), but the record keeps the user's: none."""
    base_request = _user_value(get(resources, "requests", "memory"), applied.get("memoryRequest"))
    base_limit = _user_value(get(resources, "limits", "memory"), applied.get("memoryLimit"))
    has_request = base_request if base_request is not None else get(inherited, "requests", "memory")
    has_limit = base_limit if base_limit is not None else get(inherited, "limits", "memory")
    start = has_request if has_request is not None else has_limit
    request = (quantity_to_bytes(start) if start is not None else 0) + add
    limit = None
    if has_limit is not None:
        limit = max(quantity_to_bytes(has_limit) + add, request)
    record: dict[str, Any] = {"memoryRequest": {"base": base_request, "applied": request}}
    if limit is not None:
        record["memoryLimit"] = {"base": base_limit, "applied": limit}
    return Memory(request, limit, record)


def _resources(memory: Memory) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"memory": to_quantity(memory.request)}}
    if memory.limit is not None:
        resources["limits"] = {"memory": to_quantity(memory.limit)}
    return resources


@dataclass(frozen=True)
class _Shm:
    volume: dict[str, Any]
    mount: dict[str, Any] | None  # None: the user's mount stays
    record: dict[str, Any]


def _shm(
    container: Mapping[str, Any],
    pod: PodTemplate,
    size: int,
    applied: Mapping[str, Any],
) -> _Shm | Conflict:
    """/dev/shm must hold the whole CPU tier. A user's memory emptyDir there is resized (its
    old size recorded); anything else mounted there is a conflict. A volume the template only
    inherits (a KServe runtime's) is added to the template with kvtier's size, and recorded as
    inherited so that the take-back removes it again rather than leaving a copy behind."""
    mount = by_key(container.get("volumeMounts"), "mountPath", SHM_PATH)
    user_name = mount.get("name")
    if not mount or user_name == DSHM_VOLUME:
        volume: dict[str, Any] = {
            "name": DSHM_VOLUME,
            "emptyDir": {"medium": "Memory", "sizeLimit": to_quantity(size)},
        }
        return _Shm(volume, {"name": DSHM_VOLUME, "mountPath": SHM_PATH}, {})
    user_name = str(user_name)
    own = by_key(pod.volumes, "name", user_name)
    user_volume = own or by_key(pod.inherited_volumes, "name", user_name)
    empty_dir = user_volume.get("emptyDir")
    if not isinstance(empty_dir, Mapping) or empty_dir.get("medium") != "Memory":
        return Conflict(
            f"{SHM_PATH} is mounted from volume {user_name}, which is not a memory emptyDir; "
            f"kvtier needs a memory emptyDir of {to_quantity(size)} there for the CPU tier"
        )
    base = _user_value(empty_dir.get("sizeLimit"), get(applied, "shm"))
    volume = {
        "name": user_name,
        "emptyDir": {"medium": "Memory", "sizeLimit": to_quantity(size)},
    }
    record: dict[str, Any] = {"volume": user_name, "base": base, "applied": size}
    if get(applied, "shm", "inherited") or not own:
        record["inherited"] = True
    return _Shm(volume, None, {"shm": record})


# --- kvtier's fields of one pod template --------------------------------------------------------


@dataclass
class PodParts:
    """Fields kvtier owns in the vLLM container and the pod, plus the record to store."""

    container: dict[str, Any] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    init_containers: list[dict[str, Any]] = field(default_factory=list)  # the evictor sidecar


def evictor_sidecar(offload: Offload, volume: str, mount_path: str) -> list[dict[str, Any]]:
    """The evictor sidecar on a per-pod disk volume, [] when the tier has none."""
    if offload.evictor is None or not isinstance(offload.disk, PerPodClaim):
        return []
    settings = replace(offload.evictor, volume_name=volume, mount_path=mount_path)
    return [nvme_evictor_sidecar(settings)]


def pod_parts(
    target: Mapping[str, Any],
    offload: Offload,
    pod: PodTemplate,
    *,
    mount_disk: bool,
    role: RoleOffload | None = None,
) -> PodParts | Conflict:
    """kvtier's fields for one pod template, sized for `role` (default: the decode figures)."""
    container = pod.container
    applied_here = record_at(applied(target), pod.name)
    parts = PodParts()
    figures = role or offload.plan
    pod_memory, shm_bytes = figures.pod_memory_bytes, figures.shm_bytes

    memory = memory_for(container.get("resources"), pod_memory, applied_here, pod.inherited)
    parts.container["resources"] = _resources(memory)
    parts.record.update(memory.record)

    mounts: list[dict[str, Any]] = []
    if shm_bytes is not None:  # the release keeps the tier in a /dev/shm file
        shm = _shm(container, pod, shm_bytes, applied_here)
        if isinstance(shm, Conflict):
            return shm
        parts.volumes.append(shm.volume)
        mounts += [shm.mount] if shm.mount else []
        parts.record.update(shm.record)

    if mount_disk and offload.disk is not None:
        taken = by_key(container.get("volumeMounts"), "mountPath", offload.mount_path)
        if taken and taken.get("name") != KV_CACHE_VOLUME:
            return Conflict(
                f"{offload.mount_path} is already mounted from volume {taken.get('name')}"
            )
        parts.volumes.append(offload.disk.volume(KV_CACHE_VOLUME))
        mounts.append({"name": KV_CACHE_VOLUME, "mountPath": offload.mount_path})
        parts.init_containers += evictor_sidecar(offload, KV_CACHE_VOLUME, offload.mount_path)
    if mounts:
        parts.container["volumeMounts"] = mounts

    # Replicas sharing one fs tier must hash prefixes alike. A user's own seed is kept; one
    # the record marks as kvtier's is kvtier's to update or drop.
    seed = offload.python_hash_seed if role is None or role.role == DECODE else None
    own_env: list[dict[str, Any]] = []
    # The obj tier's keys by reference (kvtier never reads the Secret); first, so that the
    # $(AWS_...) a release's config names expand in env values after them. A user's own
    # variable of that name is kept.
    secret = offload.object_store_secret
    own_keys = applied_here.get("objectStoreEnv")
    if secret and all(env(container, n) is None or own_keys for n in OBJECT_STORE_ENV):
        own_env += [
            {"name": n, "valueFrom": {"secretKeyRef": {"name": secret, "key": n}}}
            for n in OBJECT_STORE_ENV
        ]
        parts.record["objectStoreEnv"] = True
    if seed is not None and (env(container, HASH_SEED_ENV) is None or applied_here.get("hashSeed")):
        own_env.append({"name": HASH_SEED_ENV, "value": seed})
        parts.record["hashSeed"] = True
    if own_env:
        parts.container["env"] = own_env

    # A container restart (OOMKill) keeps the memory emptyDir and the file a killed vLLM left
    # there; postStart runs on every start, long before vLLM maps its tier. A user's own hook
    # is kept (summary() says the file is then not removed).
    hook = get(container, "lifecycle", "postStart")
    if offload.clear_stale_shm_file and shm_bytes is not None and hook in (None, STALE_SHM_HOOK):
        parts.container["lifecycle"] = {"postStart": copy.deepcopy(STALE_SHM_HOOK)}
    return parts


def put_template(spec: dict[str, Any], template: str, value: dict[str, Any]) -> None:
    """Put a pod template's body at its dotted path under spec."""
    node = spec
    *parents, last = template.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def template_body(main: dict[str, Any], parts: PodParts) -> dict[str, Any]:
    """kvtier's part of one pod template whose lists are keyed by name (a PodSpec's). No
    volumes list when kvtier adds none: an apply of `volumes: []` would leave an empty list
    on a template that had none, which the take-back does not remove."""
    body: dict[str, Any] = {"containers": [main]}
    if parts.volumes:
        body["volumes"] = parts.volumes
    if parts.init_containers:
        body["initContainers"] = parts.init_containers
    return body


def summary(target: Mapping[str, Any], offload: Offload, how: str, memory: int) -> str:
    """The apply's line for a person: where the flag goes, the tier, memory and /dev/shm."""
    meta = target["metadata"]
    disk = f" + {offload.disk_label}" if offload.disk_label else ""
    plan = offload.plan
    return (
        f"{target['kind']} {meta['namespace']}/{meta['name']}: {how} (CPU tier "
        f"{to_quantity(plan.cpu_bytes)}{disk}), memory request {to_quantity(memory)}, "
        + (
            f"{SHM_PATH} {to_quantity(plan.shm_bytes)}"
            if plan.shm_bytes is not None
            else f"no {SHM_PATH} (the release keeps the tier in private memory)"
        )
    )


# --- the take-back ------------------------------------------------------------------------------


def pod_unapply_ops(
    target: Mapping[str, Any], pod: PodTemplate, applied: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Ops that take kvtier's fields out of one pod template and give the user's values back."""
    if pod.container_path is None:
        return []
    container = pod.container
    path = list(pod.container_path)
    ops = [dict(op) for op in pod.container_guard]
    ops += item_ops(target, [*path, "volumeMounts"], "name", OWN_VOLUMES)
    own_env = {HASH_SEED_ENV} if applied.get("hashSeed") else set()
    if applied.get("objectStoreEnv"):
        own_env |= set(OBJECT_STORE_ENV)
    if "additionalArgs" in applied:
        entries = container.get("env") or []
        base = get(applied, "additionalArgs", "base")
        index = next(
            (i for i, e in enumerate(entries) if e.get("name") == ADDITIONAL_ARGS_ENV), None
        )
        if base is None:
            own_env.add(ADDITIONAL_ARGS_ENV)
        elif index is not None:
            ops += value_ops(target, [*path, "env", str(index), "value"], base)
    ops += item_ops(target, [*path, "env"], "name", own_env)
    for key, section in (("memoryRequest", "requests"), ("memoryLimit", "limits")):
        if key in applied:
            where = [*path, "resources", section, "memory"]
            ops += value_ops(target, where, get(applied, key, "base"), floor=len(path) + 1)
    volumes_path = list(pod.volumes_path)
    shm = get(applied, "shm", "volume")
    inherited = {str(shm)} if shm is not None and get(applied, "shm", "inherited") else set()
    for i, volume in enumerate(pod.volumes):
        if shm is not None and volume.get("name") == shm and not inherited:
            where = [*volumes_path, str(i), "emptyDir", "sizeLimit"]
            ops += value_ops(target, where, get(applied, "shm", "base"))
    if pod.args_path is not None and "kvTransferConfig" in applied:
        users = user_args(target, container.get("args") or [], applied["kvTransferConfig"])
        ops += list_ops(target, pod.args_path, users)
    if get(container, "lifecycle", "postStart") == STALE_SHM_HOOK:
        ops += value_ops(target, [*path, "lifecycle", "postStart"], None, floor=len(path) + 1)
    ops += item_ops(target, list(pod.init_containers_path), "name", {EVICTOR_CONTAINER})
    # Volumes last: nothing mounts them any more once the ops above went through.
    ops += item_ops(target, volumes_path, "name", OWN_VOLUMES | inherited)
    return ops


def unapply_patch(target: Mapping[str, Any], ops: list[dict[str, Any]]) -> list[DesiredWrite]:
    """The take-back: one JSON patch, all or nothing, guarded by tests of the values read, of
    the kind's `ops` and the removal of kvtier's record.

    Not an apply: a field someone else also applies (Argo CD carrying the live value of an
    ignored field into its sync makes it a co-owner) would survive the loss of kvtier's
    ownership."""
    ops = [*ops, *value_ops(target, ["metadata", "annotations", APPLIED_ANNOTATION], None, floor=2)]
    return json_patch(
        target,
        ops,
        "back to the user's own configuration (kvtier's items and record removed, the user's "
        "values restored)",
    )
