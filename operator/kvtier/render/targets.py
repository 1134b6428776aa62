"""Server-side-apply bodies for the model server: what kvtier owns in each target kind.

An apply body holds only apiVersion, kind, metadata.name/namespace and the fields kvtier owns;
list entries merge by key (env by name, volumes by name, volumeMounts by mountPath, containers
by name), so the user's other entries stay theirs. Three values are not kvtier's alone and are
overwritten (the apply must be forced): the atomic `args` list of an InferenceService, the env
value VLLM_ADDITIONAL_ARGS of an LLMInferenceService v1alpha1, and the memory request/limit
(plus the size of a /dev/shm volume the user already had). kvtier records what the user had
and what it wrote in the annotation kvcache.io/applied, so that

- a re-render adds the tier to the user's value, not to its own previous result;
- kvtier tells its own --kv-transfer-config from one the user passes (a conflict);
- `unapply_body` puts the user's values back (dropping a field from an apply body deletes it
  when kvtier is its only owner, which forcing made it).

Memory: request = the user's request (else their limit, which Kubernetes would copy into the
request, else 0) + sizing.pod_memory_bytes. Limit = the user's limit + pod_memory_bytes when
they set one, never below the new request; no limit when they set none, because adding a cap
the server never had could OOM-kill it for memory unrelated to the tier.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtier.render.naming import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.render.quantities import quantity_to_bytes, to_quantity
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.sizing.vllm import kv_transfer_config_arg

APPLIED_ANNOTATION = "kvcache.io/applied"
KV_FLAG = "--kv-transfer-config"
_KV_FLAGS = (KV_FLAG, "--kv_transfer_config")  # vLLM accepts both spellings
ADDITIONAL_ARGS_ENV = "VLLM_ADDITIONAL_ARGS"
HASH_SEED_ENV = "PYTHONHASHSEED"
MAIN_CONTAINER = "main"
SHM_PATH = "/dev/shm"

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
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Offload:
    """What the model server needs for its tiers, from the sizing plan."""

    kv_transfer_config: Mapping[str, Any]
    cpu_bytes: int
    pod_memory_bytes: int
    shm_bytes: int
    disk: SharedClaim | PerPodClaim | None = None
    disk_label: str | None = None  # "NVMe" / "CephFS", for the summary
    eviction_policy: str = "lru"
    mount_path: str = "/mnt/kv-cache"
    python_hash_seed: str | None = None  # set when replicas share a disk tier

    @property
    def arg(self) -> str:
        return kv_transfer_config_arg(self.kv_transfer_config)


@dataclass(frozen=True)
class Conflict:
    """The target already carries an offload config kvtier did not write."""

    message: str


# --- reading the target -------------------------------------------------------------------------


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
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


def _own_suffix(own: str) -> str:
    # VLLM_ADDITIONAL_ARGS is split by a shell: single quotes keep the JSON one word.
    return f"{KV_FLAG} '{own}'"


def _strip_own_text(text: str, own: str | None) -> tuple[str, bool]:
    """VLLM_ADDITIONAL_ARGS without kvtier's suffix, and whether a foreign flag remains."""
    if own is not None and text.endswith(_own_suffix(own)):
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


def _restored_resources(applied: Mapping[str, Any]) -> dict[str, Any]:
    """The user's memory values kvtier overwrote, to hand back on removal."""
    resources: dict[str, Any] = {}
    for key, section in (("memoryRequest", "requests"), ("memoryLimit", "limits")):
        base = _get(applied, key, "base")
        if base is not None:
            resources[section] = {"memory": base}
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


def _restored_shm(applied: Mapping[str, Any]) -> list[dict[str, Any]]:
    name = _get(applied, "shm", "volume")
    base = _get(applied, "shm", "base")
    if name is None or base is None:
        return []
    return [{"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": base}}]


# --- shared pieces of every pod-level body ------------------------------------------------------


@dataclass
class _PodParts:
    """Fields kvtier owns in the vLLM container and the pod, plus the record to store."""

    container: dict[str, Any] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


def _disk_volume(disk: SharedClaim | PerPodClaim) -> dict[str, Any]:
    if isinstance(disk, SharedClaim):
        return {"name": KV_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": disk.name}}
    return {
        "name": KV_CACHE_VOLUME,
        "ephemeral": {
            "volumeClaimTemplate": {
                "metadata": {"labels": dict(disk.labels)},
                "spec": copy.deepcopy(dict(disk.spec)),
            }
        },
    }


def _pod_parts(
    target: Mapping[str, Any], offload: Offload, *, mount_disk: bool
) -> _PodParts | Conflict:
    container = _container(target)
    volumes = _volumes(target)
    applied = _applied(target)
    parts = _PodParts()

    memory = memory_for(container.get("resources"), offload.pod_memory_bytes, applied)
    parts.container["resources"] = _resources(memory)
    parts.record.update(memory.record)

    shm = _shm(container, volumes, offload.shm_bytes, applied)
    if isinstance(shm, Conflict):
        return shm
    parts.volumes.append(shm.volume)
    mounts = [shm.mount] if shm.mount else []
    parts.record.update(shm.record)

    if mount_disk and offload.disk is not None:
        taken = _by_key(container.get("volumeMounts"), "mountPath", offload.mount_path)
        if taken and taken.get("name") != KV_CACHE_VOLUME:
            return Conflict(
                f"{offload.mount_path} is already mounted from volume {taken.get('name')}"
            )
        parts.volumes.append(_disk_volume(offload.disk))
        mounts.append({"name": KV_CACHE_VOLUME, "mountPath": offload.mount_path})
    if mounts:
        parts.container["volumeMounts"] = mounts

    # Replicas sharing one fs tier must hash prefixes alike. A user's own seed is kept; one
    # the record marks as kvtier's is kvtier's to update or drop.
    seed = offload.python_hash_seed
    if seed is not None and (_env(container, HASH_SEED_ENV) is None or applied.get("hashSeed")):
        parts.container["env"] = [{"name": HASH_SEED_ENV, "value": seed}]
        parts.record["hashSeed"] = True
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
        f"{SHM_PATH} {to_quantity(offload.shm_bytes)}"
    )


def _write(target: Mapping[str, Any], body: dict[str, Any], summary: str) -> DesiredWrite:
    meta = target["metadata"]
    return DesiredWrite(
        "Apply", body["apiVersion"], body["kind"], meta["name"], meta["namespace"], body, summary
    )


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


def inference_service_patch(target: Mapping[str, Any], offload: Offload) -> DesiredWrite | Conflict:
    """KServe InferenceService v1beta1: the flag in spec.predictor.model.args (atomic: the
    user's args are carried along), volumes in spec.predictor.volumes, mounts, env and memory
    in spec.predictor.model."""
    prepared = _flag_parts(target, offload, "spec.predictor.model")
    if isinstance(prepared, Conflict):
        return prepared
    container, own, parts = prepared
    user_args, _ = _strip_own_args(container.get("args") or [], own)
    model = {**parts.container, "args": [*user_args, KV_FLAG, offload.arg]}
    record = {**parts.record, "kvTransferConfig": offload.arg}
    body = {
        "apiVersion": ISVC_V1BETA1[0],
        "kind": ISVC_V1BETA1[1],
        "metadata": _metadata(target, record),
        "spec": {"predictor": {"model": model, "volumes": parts.volumes}},
    }
    request = record["memoryRequest"]["applied"]
    return _write(target, body, _summary(target, offload, f"args {KV_FLAG}", request))


def llmisvc_v1alpha1_patch(target: Mapping[str, Any], offload: Offload) -> DesiredWrite | Conflict:
    """llm-d LLMInferenceService v1alpha1: the flag appended to env VLLM_ADDITIONAL_ARGS of
    the `main` container (JSON single-quoted), volumes in spec.template.volumes."""
    prepared = _flag_parts(target, offload, f"container {MAIN_CONTAINER}")
    if isinstance(prepared, Conflict):
        return prepared
    container, own, parts = prepared
    env = _env(container, ADDITIONAL_ARGS_ENV)
    user_text, _ = _strip_own_text(str(env.get("value", "")) if env else "", own)
    value = f"{user_text} {_own_suffix(offload.arg)}".lstrip()
    main = {
        "name": MAIN_CONTAINER,
        **parts.container,
        "env": [{"name": ADDITIONAL_ARGS_ENV, "value": value}, *parts.container.get("env", [])],
    }
    record = {
        **parts.record,
        "kvTransferConfig": offload.arg,
        "additionalArgs": {"base": user_text if env else None},
    }
    body = {
        "apiVersion": LLMISVC_V1ALPHA1[0],
        "kind": LLMISVC_V1ALPHA1[1],
        "metadata": _metadata(target, record),
        "spec": {"template": {"containers": [main], "volumes": parts.volumes}},
    }
    request = record["memoryRequest"]["applied"]
    return _write(target, body, _summary(target, offload, ADDITIONAL_ARGS_ENV, request))


def _native_secondary(disk: SharedClaim | PerPodClaim) -> dict[str, Any]:
    if isinstance(disk, SharedClaim):
        return {"fileSystem": {"pvc": {"ref": {"name": disk.name}}}}
    return {"fileSystem": {"pvc": {"spec": copy.deepcopy(dict(disk.spec))}}}


def llmisvc_v1alpha2_patch(target: Mapping[str, Any], offload: Offload) -> DesiredWrite | Conflict:
    """llm-d LLMInferenceService v1alpha2: the native spec.kvCacheOffloading (KServe writes
    the flag and mounts the disk tier itself); kvtier adds memory, /dev/shm and the seed in
    spec.template, which the native field does not cover."""
    container = _container(target)
    applied = _applied(target)
    if _get(target, "spec", "kvCacheOffloading") is not None and not applied:
        return Conflict("spec.kvCacheOffloading is already set by another manager")
    where = _conflict_in_container(container, None)
    if where is not None:
        return Conflict(f"container {MAIN_CONTAINER} already passes {KV_FLAG} in {where}")
    parts = _pod_parts(target, offload, mount_disk=False)
    if isinstance(parts, Conflict):
        return parts
    native: dict[str, Any] = {
        "cpu": to_quantity(offload.cpu_bytes),
        "evictionPolicy": offload.eviction_policy,
    }
    if offload.disk is not None:
        native["secondary"] = [_native_secondary(offload.disk)]
    main = {"name": MAIN_CONTAINER, **parts.container}
    record = {**parts.record, "kvCacheOffloading": True}
    body = {
        "apiVersion": LLMISVC_V1ALPHA2[0],
        "kind": LLMISVC_V1ALPHA2[1],
        "metadata": _metadata(target, record),
        "spec": {
            "kvCacheOffloading": native,
            "template": {"containers": [main], "volumes": parts.volumes},
        },
    }
    request = record["memoryRequest"]["applied"]
    return _write(target, body, _summary(target, offload, "spec.kvCacheOffloading", request))


def target_patch(target: Mapping[str, Any], offload: Offload) -> DesiredWrite | Conflict:
    """The apply body for any supported target kind, or a Conflict."""
    version = target_version(target)
    if version == ISVC_V1BETA1:
        return inference_service_patch(target, offload)
    if version == LLMISVC_V1ALPHA1:
        return llmisvc_v1alpha1_patch(target, offload)
    return llmisvc_v1alpha2_patch(target, offload)


def unapply_body(target: Mapping[str, Any]) -> dict[str, Any]:
    """The apply body (same field manager) that removes kvtier's fields: only identity,
    plus the user's own values kvtier had overwritten (args, VLLM_ADDITIONAL_ARGS, memory,
    /dev/shm size), which would otherwise be deleted with kvtier's ownership."""
    version = target_version(target)
    container = _container(target)
    applied = _applied(target)
    body: dict[str, Any] = {
        "apiVersion": version[0],
        "kind": version[1],
        "metadata": _metadata(target, None),
    }
    restored: dict[str, Any] = {}
    resources = _restored_resources(applied)
    if resources:
        restored["resources"] = resources
    if version == ISVC_V1BETA1:
        if "kvTransferConfig" in applied:
            user_args, _ = _strip_own_args(container.get("args") or [], applied["kvTransferConfig"])
            if user_args:
                restored["args"] = user_args
    else:
        base = _get(applied, "additionalArgs", "base")
        if base:
            restored["env"] = [{"name": ADDITIONAL_ARGS_ENV, "value": base}]
    volumes = _restored_shm(applied)
    pod: dict[str, Any] = {"volumes": volumes} if volumes else {}
    if version == ISVC_V1BETA1:
        if restored:
            pod["model"] = restored
        if pod:
            body["spec"] = {"predictor": pod}
    else:
        if restored:
            pod["containers"] = [{"name": MAIN_CONTAINER, **restored}]
        if pod:
            body["spec"] = {"template": pod}
    return body
