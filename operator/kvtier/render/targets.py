"""The writes that put kvtier's fields on a model server, chosen per field by its real schema.

KServe's CRDs (v0.20) decide how each field kvtier touches merges:

- keyed lists (env by name, volumeMounts by mountPath, LLMInferenceService's
  `template.containers` and `template.volumes` by name) and plain maps are written by
  server-side apply as field manager kvtier-operator: the body holds only kvtier's entries,
  so the user's other entries stay theirs;
- atomic lists (InferenceService `spec.predictor.volumes` and `spec.predictor.model.args`:
  KServe's own PodSpec copy has no listType) would be replaced whole by an apply, so they
  get a JSON patch that sets the list to the user's items plus kvtier's, guarded by a `test`
  of the exact value kvtier read: a concurrent change fails the patch (it is re-read and
  re-rendered), it is never overwritten;
- an atomic `spec` (KServe's minimal CRDs) cannot be written without replacing the whole
  spec: the served schema says so, and policy/atomic.py refuses such a write (`AtomicSpec`)
  before anything is written.

Values that are not kvtier's alone are overwritten and recorded: the memory request/limit,
the size of a /dev/shm volume the user already had, and the env value VLLM_ADDITIONAL_ARGS
of an LLMInferenceService written as v1alpha1. The record (annotation kvcache.io/applied)
says what the user had and what kvtier wrote, so that

- a re-render adds the tier to the user's value, not to its own previous result;
- kvtier tells its own --kv-transfer-config from one the user passes (a conflict);
- `unapply_writes` puts the user's values back.

LLMInferenceService: v1alpha2 has the native `spec.kvCacheOffloading`, v1alpha1 has not, and
converting an object to v1alpha1 drops it. When another manager writes the object as v1alpha1
(its managedFields entry says so), the native field would vanish on each of their writes, so
kvtier writes the v1alpha1 form (the flag in VLLM_ADDITIONAL_ARGS), which survives both.

Ephemeral claim templates carry no labels: KServe's schema has no properties for
`volumeClaimTemplate.metadata` and prunes them (the claims bind by the spec's selector).

Memory: request = the user's request (else their limit, which Kubernetes would copy into the
request, else 0) + sizing.pod_memory_bytes. Limit = the user's limit + pod_memory_bytes when
they set one, never below the new request; no limit when they set none, because adding a cap
the server never had could OOM-kill it for memory unrelated to the tier.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvtier.names import FIELD_MANAGER
from kvtier.render.evictor import CONTAINER as EVICTOR_CONTAINER
from kvtier.render.evictor import EvictorSettings, nvme_evictor_sidecar
from kvtier.render.naming import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.render.quantities import quantity_to_bytes, to_quantity
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.roles import DECODE, PREFILL, RoleOffload
from kvtier.render.scheduler import (
    CAPACITY,
    PLUGINS_PATH,
    SchedulerProblem,
    SchedulerSync,
    restored_plugins,
    scheduler_sync,
)
from kvtier.sizing.vllm import ACCESS_KEY_ENV, SECRET_KEY_ENV, kv_transfer_config_arg

APPLIED_ANNOTATION = "kvcache.io/applied"
KV_FLAG = "--kv-transfer-config"
DTYPE_FLAG = "--kv-cache-dtype"
OBJECT_STORE_ENV = (ACCESS_KEY_ENV, SECRET_KEY_ENV)
_KV_FLAGS = (KV_FLAG, "--kv_transfer_config")  # vLLM accepts both spellings
ADDITIONAL_ARGS_ENV = "VLLM_ADDITIONAL_ARGS"
HASH_SEED_ENV = "PYTHONHASHSEED"
MAIN_CONTAINER = "main"
SHM_PATH = "/dev/shm"
SHM_FILES = f"{SHM_PATH}/vllm_offload_*.mmap"
STALE_SHM_HOOK: Mapping[str, Any] = {"exec": {"command": ["/bin/sh", "-c", f"rm -f {SHM_FILES}"]}}

ISVC_V1BETA1 = ("serving.kserve.io/v1beta1", "InferenceService")
LLMISVC_V1ALPHA1 = ("serving.kserve.io/v1alpha1", "LLMInferenceService")
LLMISVC_V1ALPHA2 = ("serving.kserve.io/v1alpha2", "LLMInferenceService")


@dataclass(frozen=True)
class SharedClaim:
    """A claim every replica mounts (CephFS, ReadWriteMany)."""

    name: str


@dataclass(frozen=True)
class PerPodClaim:
    """A claim template, one claim per pod (local NVMe)."""

    spec: Mapping[str, Any]


@dataclass(frozen=True)
class Offload:
    """What the model server needs for its tiers, from the sizing plan. The top-level figures
    are the decode role's (the only role of an InferenceService); `roles` lists every role
    of an LLMInferenceService when known (else decode on spec.template alone)."""

    kv_transfer_config: Mapping[str, Any]
    cpu_bytes: int
    pod_memory_bytes: int
    shm_bytes: int | None  # None: the release keeps the CPU tier out of /dev/shm
    disk: SharedClaim | PerPodClaim | None = None
    disk_label: str | None = None  # "NVMe" / "CephFS", for the summary
    eviction_policy: str = "lru"
    mount_path: str = "/mnt/kv-cache"
    python_hash_seed: str | None = None  # set when replicas share a disk tier
    roles: tuple[RoleOffload, ...] = ()
    # The release leaves its /dev/shm offload file behind after an OOMKill: remove it first.
    clear_stale_shm_file: bool = False
    # A per-pod disk tier's evictor: a native sidecar beside vLLM on the same volume.
    evictor: EvictorSettings | None = None
    # The --kv-cache-dtype the tier is sized for, passed where the target passes none.
    kv_cache_dtype: str | None = None
    # An obj tier's credentials: the Secret (the user's, in the target's namespace) whose
    # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY the vLLM container gets by reference.
    object_store_secret: str | None = None

    @property
    def dtype_args(self) -> list[str]:
        return [DTYPE_FLAG, self.kv_cache_dtype] if self.kv_cache_dtype else []

    @property
    def arg(self) -> str:
        return kv_transfer_config_arg(self.kv_transfer_config)

    def role_offloads(self) -> tuple[RoleOffload, ...]:
        if self.roles:
            return self.roles
        decode = RoleOffload(
            "decode",
            ("template",),
            self.kv_transfer_config,
            self.cpu_bytes,
            self.pod_memory_bytes,
            self.shm_bytes,
            0,
            self.cpu_bytes,
        )
        return (decode,)


@dataclass(frozen=True)
class Conflict:
    """The target already carries an offload config kvtier did not write."""

    message: str


# --- reading the target -------------------------------------------------------------------------


def _get(obj: Any, *path: str) -> Any:
    """The value at `path` (list items by their index as a string), else None."""
    for key in path:
        if isinstance(obj, Mapping):
            obj = obj.get(key)
        elif isinstance(obj, list) and key.isdigit() and int(key) < len(obj):
            obj = obj[int(key)]
        else:
            return None
    return obj


def _by_key(items: Sequence[Mapping[str, Any]] | None, key: str, value: str) -> Mapping[str, Any]:
    return next((i for i in items or [] if i.get(key) == value), {})


def target_version(target: Mapping[str, Any]) -> tuple[str, str]:
    """(apiVersion, kind) of a supported target, else RenderError."""
    version = (str(target.get("apiVersion", "")), str(target.get("kind", "")))
    if version not in (ISVC_V1BETA1, LLMISVC_V1ALPHA1, LLMISVC_V1ALPHA2):
        raise RenderError(
            "UnsupportedTarget",
            f"{version[1]} {version[0]} is not a supported target (InferenceService "
            "serving.kserve.io/v1beta1, LLMInferenceService serving.kserve.io/v1alpha1|v1alpha2)",
        )
    return version


def _container(target: Mapping[str, Any]) -> Mapping[str, Any]:
    """The vLLM container: spec.predictor.model, or the `main` container of spec.template."""
    if target_version(target) == ISVC_V1BETA1:
        model = _get(target, "spec", "predictor", "model")
        if not isinstance(model, Mapping):
            raise RenderError(
                "UnsupportedTarget",
                "the InferenceService has no spec.predictor.model (custom predictor containers "
                "are not supported)",
            )
        return model
    return _by_key(_get(target, "spec", "template", "containers"), "name", MAIN_CONTAINER)


def _volumes(target: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    if target_version(target) == ISVC_V1BETA1:
        return _get(target, "spec", "predictor", "volumes") or []
    return _get(target, "spec", "template", "volumes") or []


def template_path(template: str) -> list[str]:
    """The JSON path of a pod template named by its dotted path under spec."""
    return ["spec", *template.split(".")]


def _main_at(target: Mapping[str, Any], template: str) -> Mapping[str, Any]:
    if target_version(target) == ISVC_V1BETA1:
        return _container(target)
    return _by_key(_get(target, *template_path(template), "containers"), "name", MAIN_CONTAINER)


def _volumes_at(target: Mapping[str, Any], template: str) -> Sequence[Mapping[str, Any]]:
    if target_version(target) == ISVC_V1BETA1:
        return _volumes(target)
    return _get(target, *template_path(template), "volumes") or []


def _record_at(applied: Mapping[str, Any], template: str) -> Mapping[str, Any]:
    """The record of one pod template: spec.template's (and an InferenceService's) at the
    top of kvtier's record, as before roles existed; the others under `pods`."""
    if template == "template":
        return applied
    return _get(applied, "pods", template) or {}


def _applied(target: Mapping[str, Any]) -> dict[str, Any]:
    """kvtier's record on the target; {} when it never applied (or the record is garbled)."""
    text = _get(target, "metadata", "annotations", APPLIED_ANNOTATION)
    try:
        record = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _env(container: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    entry = _by_key(container.get("env"), "name", name)
    return entry or None


# --- --kv-transfer-config in args and in VLLM_ADDITIONAL_ARGS -----------------------------------


def _strip_own_args(args: Sequence[str], own: str | None) -> tuple[list[str], bool]:
    """The args without kvtier's `--kv-transfer-config <own>` pair, and whether a flag of
    someone else remains."""
    kept: list[str] = []
    foreign = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _KV_FLAGS and own is not None and i + 1 < len(args) and args[i + 1] == own:
            i += 2
            continue
        if arg in _KV_FLAGS or arg.startswith(tuple(f"{f}=" for f in _KV_FLAGS)):
            foreign = True
        kept.append(arg)
        i += 1
    return kept, foreign


def _without_pair(args: Sequence[str], flag: str, value: str | None) -> list[str]:
    """The args without the first `flag value` pair: kvtier's own, by its record."""
    kept = list(args)
    for i in range(len(kept) - 1):
        if value is not None and kept[i] == flag and kept[i + 1] == value:
            return kept[:i] + kept[i + 2 :]
    return kept


def own_kv_cache_dtype(target: Mapping[str, Any]) -> str | None:
    """The --kv-cache-dtype kvtier itself passes to the target (by its record), if any: the
    target's own flags are the others."""
    value = _applied(target).get("kvCacheDtype")
    return value if isinstance(value, str) else None


def _own_suffix(own: str, dtype: str | None = None) -> str:
    # VLLM_ADDITIONAL_ARGS is split by a shell: single quotes keep the JSON one word.
    return (f"{DTYPE_FLAG} {dtype} " if dtype else "") + f"{KV_FLAG} '{own}'"


def _strip_own_text(text: str, own: str | None, dtype: str | None = None) -> tuple[str, bool]:
    """VLLM_ADDITIONAL_ARGS without kvtier's suffix, and whether a foreign flag remains."""
    if own is not None and text.endswith(_own_suffix(own, dtype)):
        text = text[: -len(_own_suffix(own, dtype))].rstrip()
    elif own is not None and text.endswith(_own_suffix(own)):
        text = text[: -len(_own_suffix(own))].rstrip()
    return text, any(flag in text for flag in _KV_FLAGS)


def _conflict_in_container(container: Mapping[str, Any], own: str | None) -> str | None:
    """Where the container passes its own --kv-transfer-config, if anywhere."""
    for field_name in ("command", "args"):
        _, foreign = _strip_own_args(container.get(field_name) or [], own)
        if foreign:
            return f"its {field_name}"
    env = _env(container, ADDITIONAL_ARGS_ENV)
    if env is not None:
        if "valueFrom" in env:
            return f"env {ADDITIONAL_ARGS_ENV} (from valueFrom, which kvtier cannot extend)"
        _, foreign = _strip_own_text(str(env.get("value", "")), own)
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
class _Memory:
    request: int
    limit: int | None
    record: dict[str, Any]


def memory_for(
    resources: Mapping[str, Any] | None, add: int, applied: Mapping[str, Any]
) -> _Memory:
    """New memory request/limit (see the module docstring) and the record to store."""
    base_request = _user_value(_get(resources, "requests", "memory"), applied.get("memoryRequest"))
    base_limit = _user_value(_get(resources, "limits", "memory"), applied.get("memoryLimit"))
    start = base_request if base_request is not None else base_limit
    request = (quantity_to_bytes(start) if start is not None else 0) + add
    limit = None
    if base_limit is not None:
        limit = max(quantity_to_bytes(base_limit) + add, request)
    record: dict[str, Any] = {"memoryRequest": {"base": base_request, "applied": request}}
    if limit is not None:
        record["memoryLimit"] = {"base": base_limit, "applied": limit}
    return _Memory(request, limit, record)


def _resources(memory: _Memory) -> dict[str, Any]:
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
    volumes: Sequence[Mapping[str, Any]],
    size: int,
    applied: Mapping[str, Any],
) -> _Shm | Conflict:
    """/dev/shm must hold the whole CPU tier. A user's memory emptyDir there is resized (its
    old size recorded); anything else mounted there is a conflict."""
    mount = _by_key(container.get("volumeMounts"), "mountPath", SHM_PATH)
    user_name = mount.get("name")
    if not mount or user_name == DSHM_VOLUME:
        volume: dict[str, Any] = {
            "name": DSHM_VOLUME,
            "emptyDir": {"medium": "Memory", "sizeLimit": to_quantity(size)},
        }
        return _Shm(volume, {"name": DSHM_VOLUME, "mountPath": SHM_PATH}, {})
    user_name = str(user_name)
    user_volume = _by_key(volumes, "name", user_name)
    empty_dir = user_volume.get("emptyDir")
    if not isinstance(empty_dir, Mapping) or empty_dir.get("medium") != "Memory":
        return Conflict(
            f"{SHM_PATH} is mounted from volume {user_name}, which is not a memory emptyDir; "
            f"kvtier needs a memory emptyDir of {to_quantity(size)} there for the CPU tier"
        )
    base = _user_value(empty_dir.get("sizeLimit"), _get(applied, "shm"))
    volume = {
        "name": user_name,
        "emptyDir": {"medium": "Memory", "sizeLimit": to_quantity(size)},
    }
    return _Shm(volume, None, {"shm": {"volume": user_name, "base": base, "applied": size}})


# --- shared pieces of every pod-level body ------------------------------------------------------


@dataclass
class _PodParts:
    """Fields kvtier owns in the vLLM container and the pod, plus the record to store."""

    container: dict[str, Any] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    init_containers: list[dict[str, Any]] = field(default_factory=list)  # the evictor sidecar


def _evictor_sidecar(offload: Offload, volume: str, mount_path: str) -> list[dict[str, Any]]:
    """The evictor sidecar on a per-pod disk volume, [] when the tier has none."""
    if offload.evictor is None or not isinstance(offload.disk, PerPodClaim):
        return []
    settings = replace(offload.evictor, volume_name=volume, mount_path=mount_path)
    return [nvme_evictor_sidecar(settings)]


def _disk_volume(disk: SharedClaim | PerPodClaim) -> dict[str, Any]:
    if isinstance(disk, SharedClaim):
        return {"name": KV_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": disk.name}}
    return {
        "name": KV_CACHE_VOLUME,
        "ephemeral": {"volumeClaimTemplate": {"spec": copy.deepcopy(dict(disk.spec))}},
    }


def _pod_parts(
    target: Mapping[str, Any],
    offload: Offload,
    *,
    mount_disk: bool,
    role: RoleOffload | None = None,
    template: str = "template",
) -> _PodParts | Conflict:
    """kvtier's fields for one pod template (spec.template or an InferenceService's predictor
    unless `template` names another), sized for `role` (default: the decode figures)."""
    container = _main_at(target, template)
    volumes = _volumes_at(target, template)
    applied = _record_at(_applied(target), template)
    parts = _PodParts()
    pod_memory = role.pod_memory_bytes if role else offload.pod_memory_bytes
    shm_bytes = role.shm_bytes if role else offload.shm_bytes

    memory = memory_for(container.get("resources"), pod_memory, applied)
    parts.container["resources"] = _resources(memory)
    parts.record.update(memory.record)

    mounts: list[dict[str, Any]] = []
    if shm_bytes is not None:  # the release keeps the tier in a /dev/shm file
        shm = _shm(container, volumes, shm_bytes, applied)
        if isinstance(shm, Conflict):
            return shm
        parts.volumes.append(shm.volume)
        mounts += [shm.mount] if shm.mount else []
        parts.record.update(shm.record)

    if mount_disk and offload.disk is not None:
        taken = _by_key(container.get("volumeMounts"), "mountPath", offload.mount_path)
        if taken and taken.get("name") != KV_CACHE_VOLUME:
            return Conflict(
                f"{offload.mount_path} is already mounted from volume {taken.get('name')}"
            )
        parts.volumes.append(_disk_volume(offload.disk))
        mounts.append({"name": KV_CACHE_VOLUME, "mountPath": offload.mount_path})
        parts.init_containers += _evictor_sidecar(offload, KV_CACHE_VOLUME, offload.mount_path)
    if mounts:
        parts.container["volumeMounts"] = mounts

    # Replicas sharing one fs tier must hash prefixes alike. A user's own seed is kept; one
    # the record marks as kvtier's is kvtier's to update or drop.
    seed = offload.python_hash_seed if role is None or role.role == DECODE else None
    env: list[dict[str, Any]] = []
    # The obj tier's keys by reference (kvtier never reads the Secret); first, so that the
    # $(AWS_...) a release's config names expand in env values after them. A user's own
    # variable of that name is kept.
    secret = offload.object_store_secret
    own_keys = applied.get("objectStoreEnv")
    if secret and all(_env(container, n) is None or own_keys for n in OBJECT_STORE_ENV):
        env += [
            {"name": n, "valueFrom": {"secretKeyRef": {"name": secret, "key": n}}}
            for n in OBJECT_STORE_ENV
        ]
        parts.record["objectStoreEnv"] = True
    if seed is not None and (_env(container, HASH_SEED_ENV) is None or applied.get("hashSeed")):
        env.append({"name": HASH_SEED_ENV, "value": seed})
        parts.record["hashSeed"] = True
    if env:
        parts.container["env"] = env

    # A container restart (OOMKill) keeps the memory emptyDir and the file a killed vLLM left
    # there; postStart runs on every start, long before vLLM maps its tier. A user's own hook
    # is kept (summary() says the file is then not removed).
    hook = _get(container, "lifecycle", "postStart")
    if offload.clear_stale_shm_file and shm_bytes is not None and hook in (None, STALE_SHM_HOOK):
        parts.container["lifecycle"] = {"postStart": copy.deepcopy(STALE_SHM_HOOK)}
    return parts


def _metadata(target: Mapping[str, Any], record: Mapping[str, Any] | None) -> dict[str, Any]:
    meta = target.get("metadata") or {}
    out: dict[str, Any] = {"name": meta["name"], "namespace": meta["namespace"]}
    if record is not None:
        text = json.dumps(record, separators=(",", ":"), sort_keys=True)
        out["annotations"] = {APPLIED_ANNOTATION: text}
    return out


def _summary(target: Mapping[str, Any], offload: Offload, how: str, memory: int) -> str:
    meta = target["metadata"]
    disk = f" + {offload.disk_label}" if offload.disk_label else ""
    return (
        f"{target['kind']} {meta['namespace']}/{meta['name']}: {how} (CPU tier "
        f"{to_quantity(offload.cpu_bytes)}{disk}), memory request {to_quantity(memory)}, "
        + (
            f"{SHM_PATH} {to_quantity(offload.shm_bytes)}"
            if offload.shm_bytes is not None
            else f"no {SHM_PATH} (the release keeps the tier in private memory)"
        )
    )


def _write(target: Mapping[str, Any], body: dict[str, Any], summary: str) -> DesiredWrite:
    meta = target["metadata"]
    return DesiredWrite(
        "Apply", body["apiVersion"], body["kind"], meta["name"], meta["namespace"], body, summary
    )


# --- schema facts read off the object -----------------------------------------------------------


def _fields_of(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    fields = entry.get("fieldsV1")
    return fields if isinstance(fields, Mapping) else {}


def _foreign_entries(target: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """managedFields entries of other managers for the main resource (not status)."""
    entries = _get(target, "metadata", "managedFields") or []
    return [
        e
        for e in entries
        if isinstance(e, Mapping)
        and e.get("manager") != FIELD_MANAGER
        and e.get("subresource") in (None, "")
    ]


def foreign_versions(target: Mapping[str, Any]) -> set[str]:
    """The API versions other managers write the object in (their managedFields)."""
    return {str(e.get("apiVersion")) for e in _foreign_entries(target) if e.get("apiVersion")}


# --- atomic lists: a guarded JSON patch ---------------------------------------------------------


def _pointer(path: Sequence[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _overlay(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, maps merged key by key (kvtier's fields on a user's list item)."""
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = _overlay(below, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _with_items(
    current: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]], drop: set[str]
) -> list[dict[str, Any]]:
    """`current` without the named items in `drop`, with `items` laid over the entries of the
    same name in place (new ones appended)."""
    by_name = {str(i["name"]): i for i in items}
    out = []
    for entry in current:
        name = str(entry.get("name"))
        if name in by_name:
            out.append(_overlay(entry, by_name.pop(name)))
        elif name not in drop:
            out.append(dict(entry))
    return [*out, *(copy.deepcopy(dict(i)) for i in by_name.values())]


def list_ops(
    target: Mapping[str, Any], path: Sequence[str], new: Sequence[Any]
) -> list[dict[str, Any]]:
    """JSON patch ops that set the atomic list at `path` to `new` only if it still holds what
    kvtier read (a `test` of the whole value, or of its parent when the list is absent); []
    when it already holds `new`."""
    current = _get(target, *path)
    if (current or []) == list(new):
        return []
    if current is None:
        parent = list(path[:-1])
        return [
            {"op": "test", "path": _pointer(parent), "value": _get(target, *parent)},
            {"op": "add", "path": _pointer(path), "value": list(new)},
        ]
    test = {"op": "test", "path": _pointer(path), "value": current}
    if not new:
        return [test, {"op": "remove", "path": _pointer(path)}]
    return [test, {"op": "replace", "path": _pointer(path), "value": list(new)}]


def _with_list(
    target: Mapping[str, Any], path: Sequence[str], new: Sequence[Any]
) -> dict[str, Any]:
    """`target` as list_ops(target, path, new) leaves it: for the guards of a later op of the
    same patch, which test what the ops before them left."""
    out = copy.deepcopy(dict(target))
    node = out
    for key in path[:-1]:
        node = node[key]
    if new:
        node[path[-1]] = copy.deepcopy(list(new))
    else:
        node.pop(path[-1], None)
    return out


def _json_patch(
    target: Mapping[str, Any], ops: list[dict[str, Any]], what: str
) -> list[DesiredWrite]:
    """The JSON patch write of `ops` on the target ([] without ops); `what` for a person."""
    if not ops:
        return []
    meta = target["metadata"]
    return [
        DesiredWrite(
            "Patch",
            str(target["apiVersion"]),
            str(target["kind"]),
            meta["name"],
            meta["namespace"],
            {"jsonPatch": ops},
            f"{target['kind']} {meta['namespace']}/{meta['name']}: {what}",
        )
    ]


# --- per kind -----------------------------------------------------------------------------------


def _flag_parts(
    target: Mapping[str, Any], offload: Offload, holder: str
) -> tuple[Mapping[str, Any], str | None, _PodParts] | Conflict:
    """(container, kvtier's own earlier flag, pod parts) for a patch that passes the flag
    itself, or a Conflict when the user already passes one in `holder`."""
    container = _container(target)
    own = _applied(target).get("kvTransferConfig")
    where = _conflict_in_container(container, own)
    if where is not None:
        return Conflict(f"{holder} already passes {KV_FLAG} in {where}")
    parts = _pod_parts(target, offload, mount_disk=True)
    if isinstance(parts, Conflict):
        return parts
    return container, own, parts


_OWN_VOLUMES = {DSHM_VOLUME, KV_CACHE_VOLUME}
_ISVC_VOLUMES = ("spec", "predictor", "volumes")
_ISVC_ARGS = ("spec", "predictor", "model", "args")
_ISVC_INIT = ("spec", "predictor", "initContainers")  # atomic too
# Where KServe mounts a v1alpha2 object's first native fs tier in the pods it renders.
_NATIVE_VOLUME = "kv-cache-secondary-0"
_NATIVE_MOUNT = "/mnt/kv-cache-0"


def inference_service_patch(
    target: Mapping[str, Any], offload: Offload
) -> list[DesiredWrite] | Conflict:
    """KServe InferenceService v1beta1: the atomic spec.predictor.volumes and
    spec.predictor.model.args by a guarded JSON patch (the user's items kept, kvtier's added),
    then mounts, env and memory in spec.predictor.model by server-side apply."""
    prepared = _flag_parts(target, offload, "spec.predictor.model")
    if isinstance(prepared, Conflict):
        return prepared
    container, own, parts = prepared
    user_args, _ = _strip_own_args(container.get("args") or [], own)
    user_args = _without_pair(user_args, DTYPE_FLAG, own_kv_cache_dtype(target))
    volumes = _with_items(_volumes(target), parts.volumes, _OWN_VOLUMES)
    args = [*user_args, *offload.dtype_args, KV_FLAG, offload.arg]
    init = _with_items(_get(target, *_ISVC_INIT) or [], parts.init_containers, {EVICTOR_CONTAINER})
    # The init containers' guard may test the predictor the ops before have changed.
    ahead = _with_list(_with_list(target, _ISVC_VOLUMES, volumes), _ISVC_ARGS, args)
    ops = [
        *list_ops(target, _ISVC_VOLUMES, volumes),
        *list_ops(target, _ISVC_ARGS, args),
        *list_ops(ahead, _ISVC_INIT, init),
    ]
    names = ", ".join(v["name"] for v in parts.volumes)
    sidecar = f", init container {EVICTOR_CONTAINER}" if parts.init_containers else ""
    lists = _json_patch(
        target, ops, f"volumes {names}{sidecar} and args {KV_FLAG} beside the user's own"
    )
    record = {**parts.record, "kvTransferConfig": offload.arg}
    if offload.kv_cache_dtype:
        record["kvCacheDtype"] = offload.kv_cache_dtype
    body = {
        "apiVersion": ISVC_V1BETA1[0],
        "kind": ISVC_V1BETA1[1],
        "metadata": _metadata(target, record),
        "spec": {"predictor": {"model": parts.container}},
    }
    request = record["memoryRequest"]["applied"]
    summary = _summary(target, offload, f"args {KV_FLAG}", request)
    return [*lists, _write(target, body, summary)]


def users_part(target: Mapping[str, Any], part: str) -> bool:
    """Whether the part of spec at the dotted path `part` (spec.worker, spec.prefill, ...) is
    there because someone other than kvtier writes it. One that only kvtier's own fields keep
    alive (its owner dropped it from their manifest: server-side apply keeps the fields of the
    other managers) is not the user's any more, and writing it again would bring back a
    worker or a prefill role they removed. Objects whose managedFields record nothing (built
    by hand, or stripped as backup and restore tools leave them) are taken as they are."""
    if not isinstance(_get(target, *template_path(part)), Mapping):
        return False
    entries = _get(target, "metadata", "managedFields") or []
    if not any(_fields_of(e) for e in entries if isinstance(e, Mapping)):
        return True
    path = ["f:spec", *(f"f:{key}" for key in part.split("."))]
    return any(isinstance(_get(_fields_of(e), *path), Mapping) for e in _foreign_entries(target))


def _pod_templates(target: Mapping[str, Any], offload: Offload) -> list[tuple[RoleOffload, str]]:
    """(role, pod template) for every pod template that runs vLLM: spec.template always (as
    before roles), the others when the user's object has them."""
    out = []
    for role in offload.role_offloads():
        for template in role.templates:
            if template == "template" or users_part(target, template):
                out.append((role, template))
    return out


def _put_template(spec: dict[str, Any], template: str, value: dict[str, Any]) -> None:
    node = spec
    *parents, last = template.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def _template_body(main: dict[str, Any], parts: _PodParts) -> dict[str, Any]:
    """kvtier's part of one LLMInferenceService pod template (its lists keyed by name)."""
    body: dict[str, Any] = {"containers": [main], "volumes": parts.volumes}
    if parts.init_containers:
        body["initContainers"] = parts.init_containers
    return body


def _holder(template: str) -> str:
    where = "" if template == "template" else f"spec.{template} "
    return f"{where}container {MAIN_CONTAINER}"


def _file_record(record: dict[str, Any], template: str, part: Mapping[str, Any]) -> None:
    if template == "template":
        record.update(part)
    else:
        record.setdefault("pods", {})[template] = dict(part)


def llmisvc_v1alpha1_patch(
    target: Mapping[str, Any], offload: Offload, scheduler: Mapping[str, Any] | None = None
) -> list[DesiredWrite] | Conflict:
    """llm-d LLMInferenceService in its v1alpha1 form: in every pod template that runs vLLM,
    the role's flag appended to env VLLM_ADDITIONAL_ARGS of the `main` container (JSON
    single-quoted), volumes in the template's volumes (keyed by name). Also used for a
    v1alpha2 object that others write as v1alpha1, where the native field would not survive."""
    applied = _applied(target)
    spec: dict[str, Any] = {}
    record: dict[str, Any] = {}
    if offload.kv_cache_dtype:
        record["kvCacheDtype"] = offload.kv_cache_dtype
    for role, template in _pod_templates(target, offload):
        container = _main_at(target, template)
        rec = _record_at(applied, template)
        own = rec.get("kvTransferConfig")
        where = _conflict_in_container(container, own)
        if where is not None:
            return Conflict(f"{_holder(template)} already passes {KV_FLAG} in {where}")
        parts = _pod_parts(
            target, offload, mount_disk=role.role == DECODE, role=role, template=template
        )
        if isinstance(parts, Conflict):
            return parts
        env = _env(container, ADDITIONAL_ARGS_ENV)
        user_text, _ = _strip_own_text(
            str(env.get("value", "")) if env else "", own, own_kv_cache_dtype(target)
        )
        value = f"{user_text} {_own_suffix(role.arg, offload.kv_cache_dtype)}".lstrip()
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
        _put_template(spec, template, _template_body(main, parts))
        # An env kvtier created holds only its flag: still no user value on a re-render.
        created = _get(rec, "additionalArgs", "base") is None and "additionalArgs" in rec
        base = user_text if env and not (created and not user_text) else None
        part = {**parts.record, "kvTransferConfig": role.arg, "additionalArgs": {"base": base}}
        _file_record(record, template, part)
    if scheduler:
        record["scheduler"] = dict(scheduler)
    body = {
        "apiVersion": LLMISVC_V1ALPHA1[0],
        "kind": LLMISVC_V1ALPHA1[1],
        "metadata": _metadata(target, record),
        "spec": spec,
    }
    request = record["memoryRequest"]["applied"]
    return [_write(target, body, _summary(target, offload, ADDITIONAL_ARGS_ENV, request))]


def _native_secondary(disk: SharedClaim | PerPodClaim) -> dict[str, Any]:
    if isinstance(disk, SharedClaim):
        return {"fileSystem": {"pvc": {"ref": {"name": disk.name}}}}
    return {"fileSystem": {"pvc": {"spec": copy.deepcopy(dict(disk.spec))}}}


# kvtier's record key for the native field of each role, and where the field lives.
_NATIVE = {
    DECODE: ("kvCacheOffloading", ("spec",)),
    PREFILL: ("prefillKVCacheOffloading", ("spec", "prefill")),
}


def llmisvc_v1alpha2_patch(
    target: Mapping[str, Any], offload: Offload, scheduler: Mapping[str, Any] | None = None
) -> list[DesiredWrite] | Conflict:
    """llm-d LLMInferenceService v1alpha2: the native kvCacheOffloading of each role (spec and
    spec.prefill: KServe writes the flag and mounts the disk tier itself, on leader and worker
    pods); kvtier adds memory, /dev/shm and the seed in every pod template of the role, which
    the native field does not cover. The disk tier serves decode; prefill has a CPU tier."""
    applied = _applied(target)
    spec: dict[str, Any] = {}
    record: dict[str, Any] = {}
    for role in offload.role_offloads():
        key, where = _NATIVE[role.role]
        if role.role == PREFILL and not users_part(target, PREFILL):
            continue
        if _get(target, *where, "kvCacheOffloading") is not None and not applied.get(key):
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
        found = _conflict_in_container(_main_at(target, template), None)
        if found is not None:
            return Conflict(f"{_holder(template)} already passes {KV_FLAG} in {found}")
        parts = _pod_parts(target, offload, mount_disk=False, role=role, template=template)
        if isinstance(parts, Conflict):
            return parts
        if role.role == DECODE:  # the pods KServe mounts the native disk tier in
            parts.init_containers += _evictor_sidecar(offload, _NATIVE_VOLUME, _NATIVE_MOUNT)
        main = {"name": MAIN_CONTAINER, **parts.container}
        _put_template(spec, template, _template_body(main, parts))
        _file_record(record, template, parts.record)
    if scheduler:
        record["scheduler"] = dict(scheduler)
    body = {
        "apiVersion": LLMISVC_V1ALPHA2[0],
        "kind": LLMISVC_V1ALPHA2[1],
        "metadata": _metadata(target, record),
        "spec": spec,
    }
    request = record["memoryRequest"]["applied"]
    summary = _summary(target, offload, "spec.kvCacheOffloading", request)
    return [_write(target, body, summary)]


def llmisvc_form(target: Mapping[str, Any], offload: Offload | None = None) -> tuple[str, str]:
    """The LLMInferenceService version kvtier writes: v1alpha2 (the native field) unless the
    object is v1alpha1, another manager writes it as v1alpha1, or kvtier must pass
    --kv-cache-dtype (the native field has no place for it: the flags go in
    VLLM_ADDITIONAL_ARGS)."""
    version = target_version(target)
    if version == LLMISVC_V1ALPHA1 or LLMISVC_V1ALPHA1[0] in foreign_versions(target):
        return LLMISVC_V1ALPHA1
    if offload is not None and (offload.kv_cache_dtype or offload.disk_label == "ObjectStore"):
        return LLMISVC_V1ALPHA1  # KServe's native field has no obj tier either
    return version


def llmisvc_scheduler(
    target: Mapping[str, Any], offload: Offload, layout: bool | SchedulerProblem
) -> SchedulerSync | SchedulerProblem | None:
    """The scheduler's CPU-tier scorer for an LLMInferenceService target (render/scheduler.py;
    `layout` as there); None for other kinds or when no CPU-tier scorer is enabled."""
    if target_version(target) == ISVC_V1BETA1:
        return None
    return scheduler_sync(target, offload.role_offloads(), _applied(target), layout)


def target_patch(
    target: Mapping[str, Any],
    offload: Offload,
    scheduler: SchedulerSync | SchedulerProblem | None = None,
) -> list[DesiredWrite] | Conflict:
    """The writes for any supported target kind (a JSON patch of atomic lists, if any, then
    the apply, then the scheduler's plugins list when `scheduler` syncs it), or a Conflict.

    The apply carries kvtier's record of the scheduler's user values before the patch
    changes them, so a patch that fails leaves nothing unrecorded."""
    version = target_version(target)
    if version == ISVC_V1BETA1:
        return inference_service_patch(target, offload)
    # A config in a ConfigMap is written there (render/scheduler_configmap.py), not here.
    inline = isinstance(scheduler, SchedulerSync) and scheduler.configmap is None
    sync = scheduler if isinstance(scheduler, SchedulerSync) and inline else None
    record: Mapping[str, Any] | None = sync.record if sync else None
    give_back = None
    saved = _applied(target).get("scheduler")
    if sync is None and isinstance(saved, Mapping):
        # kvtier no longer keeps the inline config in step (the picker's version moved, the
        # scorer went, the config moved to a ConfigMap): the user's values go back, and the
        # record stays until they are, so a patch that fails loses nothing.
        give_back = restored_plugins(target, saved)
        record = saved if give_back is not None else None
    if llmisvc_form(target, offload) == LLMISVC_V1ALPHA1:
        writes = llmisvc_v1alpha1_patch(target, offload, record)
    else:
        writes = llmisvc_v1alpha2_patch(target, offload, record)
    if isinstance(writes, Conflict):
        return writes
    if give_back is not None:
        plugin = saved.get("plugin") if isinstance(saved, Mapping) else None
        ops = list_ops(target, PLUGINS_PATH, give_back)
        summary = f"scheduler plugin {plugin}: the user's values back (no longer kept in step)"
        return [*writes, *_json_patch(target, ops, summary)]
    if sync is None:
        return writes
    ops = list_ops(target, PLUGINS_PATH, sync.plugins)
    summary = (
        f"scheduler plugin {sync.plugin}: {CAPACITY} {sync.capacity} (blocks of "
        f"{sync.block_size_tokens} tokens), autoTune false, beside the user's plugins"
    )
    return [*writes, *_json_patch(target, ops, summary)]


def _value_ops(
    target: Mapping[str, Any], path: Sequence[str], base: Any, floor: int | None = None
) -> list[dict[str, Any]]:
    """Ops that put the user's value `base` back at `path` (None: they had none), guarded
    by a test of what is there; [] when nothing is there. Removing a value also removes the
    maps above it (down to `floor` keys of the path) that held nothing else, so no empty
    `requests: {}` or `annotations: {}` of kvtier's making is left behind."""
    current = _get(target, *path)
    if current is None or current == base:
        return []
    if base is not None:
        return [
            {"op": "test", "path": _pointer(path), "value": current},
            {"op": "replace", "path": _pointer(path), "value": base},
        ]
    top = list(path)
    while floor is not None and len(top) > floor:
        parent = _get(target, *top[:-1])
        if not isinstance(parent, Mapping) or set(parent) != {top[-1]}:
            break
        top = top[:-1]
    value = _get(target, *top)
    return [
        {"op": "test", "path": _pointer(top), "value": value},
        {"op": "remove", "path": _pointer(top)},
    ]


def _item_ops(
    target: Mapping[str, Any], path: Sequence[str], key: str, values: set[str]
) -> list[dict[str, Any]]:
    """Ops that take the items whose `key` is in `values` out of the list at `path` (each
    guarded by a test of that key; the whole list goes when nothing else is left)."""
    items = _get(target, *path) or []
    hits = [i for i, item in enumerate(items) if item.get(key) in values]
    if not hits:
        return []
    if len(hits) == len(items):
        return [
            {"op": "test", "path": _pointer(path), "value": items},
            {"op": "remove", "path": _pointer(path)},
        ]
    ops: list[dict[str, Any]] = []
    for i in reversed(hits):  # from the end, so the indexes before stay right
        where = [*path, str(i)]
        ops += [
            {"op": "test", "path": _pointer([*where, key]), "value": items[i][key]},
            {"op": "remove", "path": _pointer(where)},
        ]
    return ops


def _container_path(
    target: Mapping[str, Any], template: str
) -> tuple[list[str], list[dict[str, Any]]] | None:
    """The JSON path of the vLLM container in a pod template, and the ops that check it is
    still there; None when the template has no `main` container any more."""
    if target_version(target) == ISVC_V1BETA1:
        return list(_ISVC_ARGS[:-1]), []
    path = template_path(template)
    containers = _get(target, *path, "containers") or []
    index = next((i for i, c in enumerate(containers) if c.get("name") == MAIN_CONTAINER), None)
    if index is None:
        return None
    path = [*path, "containers", str(index)]
    return path, [{"op": "test", "path": _pointer([*path, "name"]), "value": MAIN_CONTAINER}]


def _pod_unapply_ops(
    target: Mapping[str, Any], template: str, applied: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Ops that take kvtier's fields out of one pod template and give the user's values back."""
    isvc = target_version(target) == ISVC_V1BETA1
    located = _container_path(target, template)
    if located is None:
        return []
    container = _main_at(target, template)
    path, ops = located
    ops = list(ops)
    ops += _item_ops(target, [*path, "volumeMounts"], "name", _OWN_VOLUMES)
    own_env = {HASH_SEED_ENV} if applied.get("hashSeed") else set()
    if applied.get("objectStoreEnv"):
        own_env |= set(OBJECT_STORE_ENV)
    if "additionalArgs" in applied and not isvc:
        env = container.get("env") or []
        base = _get(applied, "additionalArgs", "base")
        index = next((i for i, e in enumerate(env) if e.get("name") == ADDITIONAL_ARGS_ENV), None)
        if base is None:
            own_env.add(ADDITIONAL_ARGS_ENV)
        elif index is not None:
            ops += _value_ops(target, [*path, "env", str(index), "value"], base)
    ops += _item_ops(target, [*path, "env"], "name", own_env)
    for key, section in (("memoryRequest", "requests"), ("memoryLimit", "limits")):
        if key in applied:
            where = [*path, "resources", section, "memory"]
            ops += _value_ops(target, where, _get(applied, key, "base"), floor=len(path) + 1)
    volumes_path = list(_ISVC_VOLUMES) if isvc else [*template_path(template), "volumes"]
    shm = _get(applied, "shm", "volume")
    for i, volume in enumerate(_volumes_at(target, template)):
        if shm is not None and volume.get("name") == shm:
            where = [*volumes_path, str(i), "emptyDir", "sizeLimit"]
            ops += _value_ops(target, where, _get(applied, "shm", "base"))
    if isvc and "kvTransferConfig" in applied:
        user_args, _ = _strip_own_args(container.get("args") or [], applied["kvTransferConfig"])
        user_args = _without_pair(user_args, DTYPE_FLAG, own_kv_cache_dtype(target))
        ops += list_ops(target, _ISVC_ARGS, user_args)
    if _get(container, "lifecycle", "postStart") == STALE_SHM_HOOK:
        ops += _value_ops(target, [*path, "lifecycle", "postStart"], None, floor=len(path) + 1)
    init_path = list(_ISVC_INIT) if isvc else [*template_path(template), "initContainers"]
    ops += _item_ops(target, init_path, "name", {EVICTOR_CONTAINER})
    # Volumes last: nothing mounts them any more once the ops above went through.
    ops += _item_ops(target, volumes_path, "name", _OWN_VOLUMES)
    return ops


def unapply_writes(target: Mapping[str, Any]) -> list[DesiredWrite]:
    """What takes kvtier's fields back: one JSON patch, all or nothing, guarded by tests of
    the values read, that removes kvtier's items and record from every pod template it
    patched and puts back the user's own values kvtier had overwritten (memory, /dev/shm
    size, VLLM_ADDITIONAL_ARGS, args, the scheduler's CPU-tier scorer parameters).

    Not an apply: a field someone else also applies (Argo CD carrying the live value of an
    ignored field into its sync makes it a co-owner) would survive the loss of kvtier's
    ownership. [] when kvtier left nothing on the target."""
    applied = _applied(target)
    if not applied and APPLIED_ANNOTATION not in (_get(target, "metadata", "annotations") or {}):
        return []
    pods = applied.get("pods")
    others = list(pods) if isinstance(pods, Mapping) else []
    ops: list[dict[str, Any]] = []
    for template in ("template", *others):
        ops += _pod_unapply_ops(target, template, _record_at(applied, template))
    for key, where in _NATIVE.values():
        if applied.get(key) and _get(target, *where, "kvCacheOffloading") is not None:
            ops += _value_ops(target, [*where, "kvCacheOffloading"], None)
    saved = applied.get("scheduler")
    plugins = restored_plugins(target, saved) if isinstance(saved, Mapping) else None
    if plugins is not None:
        ops += list_ops(target, PLUGINS_PATH, plugins)
    ops += _value_ops(target, ["metadata", "annotations", APPLIED_ANNOTATION], None, floor=2)
    return _json_patch(
        target,
        ops,
        "back to the user's own configuration (kvtier's items and record removed, the user's "
        "values restored)",
    )
