"""Every write Apply mode performs for one KVCacheTier, in order; Plan mode reports the same.

Order: the Ceph replica-1 pool and StorageClasses first (claims need them), then the NVMe
PersistentVolumes, then claims, and the target's writes last (its atomic lists, then the
apply that mounts them), so a model server never restarts onto storage that is not there
yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.tier import KVCacheTierSpec
from kvtier.names.labels import TIER_ID, TierRef
from kvtier.render.picker_version import picker_layout as layout_of
from kvtier.render.result import DesiredWrite, RenderResult
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.render.scheduler_configmap import configmap_sync, configmap_writes
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.targets.base import Conflict, RelatedObjects
from kvtier.targets.offload import Offload, RoleOffload, plan_offload
from kvtier.targets.registry import target_kind
from kvtier.tiers.base import Provision, TierRequest
from kvtier.tiers.registry import CPU, disk_tier


def render_writes(
    tier: TierRef,
    spec: KVCacheTierSpec,
    settings: EffectiveSettings,
    sizing: SizingPlan,
    target: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    replicas: int,
    roles: Sequence[RoleOffload] = (),
    evictor_image: str | None = None,
    kv_cache_dtype_flag: str | None = None,
    scheduler_configmap: Mapping[str, Any] | None = None,
    picker_layout: bool | SchedulerProblem | None = None,
    related: RelatedObjects = None,
) -> RenderResult:
    """The writes for the tier's chosen topology, or a conflict when the target already has
    an offload config kvtier did not write: the disk tier's own writes (its module under
    kvtier/tiers/, by the registry), then the target's (its kind's module). RenderError when
    the inputs cannot work (no NVMe pool or eligible node, a size above the pool's, an
    unsupported target or disk type).
    `roles`: what each role of an LLMInferenceService needs (policy/roles.py).
    `evictor_image` runs `kvtier evict` beside the disk tier (the operator's own image): a
    Deployment per CephFS claim, a native sidecar in the pods of an NVMe tier.
    `kv_cache_dtype_flag`: the --kv-cache-dtype the tier sized for, passed beside kvtier's
    --kv-transfer-config (the target passes none).
    `scheduler_configmap`: the ConfigMap the target's `spec.router.scheduler.config.ref` names,
    as read in the target's namespace (None when there is none); its scorer is written last.
    `picker_layout`: whether the endpoint picker keeps the index in the producer plugin, as
    render/picker_version.py resolves it from the LLMInferenceServiceConfigs read (None: none
    were read).
    `related`: the objects of the kinds the target's kind reads (Kind.reads), None if unread."""
    request = TierRequest(tier, spec, settings, sizing, nodes, replicas, evictor_image)
    # The disk tier's objects and claim (RenderError for a type no tier module provisions),
    # then the CPU tier's notes.
    chosen = disk_tier(sizing.disk)
    disk = chosen.provision(request) if chosen is not None else Provision()
    cpu = CPU.provision(request)
    figures = sizing.sizing
    offload = Offload(
        plan=plan_offload(
            sizing.connector,
            figures.cpu_bytes_to_use,
            figures.pod_memory_bytes,
            figures.shm_bytes,
        ),
        disk=disk.claim,
        disk_label=sizing.disk,
        eviction_policy=sizing.input.eviction_policy,
        mount_path=sizing.input.fs_root_dir,
        python_hash_seed=disk.python_hash_seed,
        clear_stale_shm_file=sizing.clear_stale_shm_file,
        kv_cache_dtype=kv_cache_dtype_flag,
        object_store_secret=disk.credentials_secret,
        roles=tuple(roles),
        evictor=disk.sidecar,
    )
    # No configs read: the target's own annotation, else what KServe does without its
    # scheduler preset (render/picker_version.py).
    layout = picker_layout if picker_layout is not None else layout_of(target, {})
    kind = target_kind(target)  # RenderError for a target no registered kind writes
    scheduler = kind.scheduler(target, offload, layout) or configmap_sync(
        target, scheduler_configmap, offload.role_offloads(), tier.id, layout
    )
    patch = kind.writes(target, offload, scheduler, related)
    if isinstance(patch, Conflict):
        return RenderResult(conflict=patch.message)
    if isinstance(scheduler, SchedulerSync) and scheduler_configmap is not None:
        patch += configmap_writes(scheduler_configmap, scheduler, tier.id)
    return RenderResult(
        writes=[*disk.writes, *patch], notes=[*disk.notes, *cpu.notes], scheduler=scheduler
    )


def prune_writes(
    tier: TierRef, existing: Sequence[Mapping[str, Any]], desired: Sequence[DesiredWrite]
) -> list[DesiredWrite]:
    """Deletes for objects of this tier (by its id label) that are no longer desired: PVs of
    nodes that left the pool, the claim of a disk tier no longer chosen. `existing` are the
    objects as read, each with apiVersion and kind; pass [] as desired on tier deletion."""
    wanted = {(w.kind, w.namespace, w.name) for w in desired}
    deletes = []
    for obj in existing:
        meta = obj.get("metadata") or {}
        if (meta.get("labels") or {}).get(TIER_ID) != tier.id:
            continue
        key = (str(obj["kind"]), meta.get("namespace"), str(meta["name"]))
        if key in wanted:
            continue
        where = f"{key[1]}/{key[2]}" if key[1] else key[2]
        deletes.append(
            DesiredWrite(
                "Delete",
                str(obj["apiVersion"]),
                key[0],
                key[2],
                key[1],
                {},
                f"{key[0]} {where}: no longer part of tier {tier.namespace}/{tier.name}",
            )
        )
    return deletes
