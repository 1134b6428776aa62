"""Every write Apply mode performs for one KVCacheTier, in order; Plan mode reports the same.

Order: the Ceph replica-1 pool and StorageClasses first (claims need them), then the NVMe
PersistentVolumes, then claims, and the target's writes last (its atomic lists, then the
apply that mounts them), so a model server never restarts onto storage that is not there
yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.policy import Retention
from kvtier.api.tier import KVCacheTierSpec
from kvtier.render.cephfs import (
    cephfs_claim,
    cephfs_size_bytes,
    cephfs_storage_class_name,
    replica1_writes,
)
from kvtier.render.evictor import EvictorSettings
from kvtier.render.evictor_writes import cephfs_evictor_write, evictor_settings
from kvtier.render.labels import TIER_ID, TierRef
from kvtier.render.naming import python_hash_seed
from kvtier.render.nvme import (
    nvme_capacity_bytes,
    nvme_claim_spec,
    nvme_storage_class,
    nvme_volumes,
)
from kvtier.render.nvme_class import class_pool_note
from kvtier.render.picker_version import picker_layout as layout_of
from kvtier.render.result import DesiredWrite, RenderError, RenderResult
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.render.scheduler_configmap import configmap_sync, configmap_writes
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.targets.base import Conflict
from kvtier.targets.offload import Offload, PerPodClaim, RoleOffload, SharedClaim, plan_offload
from kvtier.targets.pod import SHM_FILES
from kvtier.targets.registry import target_kind


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
) -> RenderResult:
    """The writes for the tier's chosen topology, or a conflict when the target already has
    an offload config kvtier did not write. RenderError when the inputs cannot work (no NVMe
    pool or eligible node, a size above the pool's, an unsupported target or disk type).
    `roles`: what each role of an LLMInferenceService needs (policy/roles.py).
    `evictor_image` runs `kvtier evict` beside the disk tier (the operator's own image): a
    Deployment per CephFS claim, a native sidecar in the pods of an NVMe tier.
    `kv_cache_dtype_flag`: the --kv-cache-dtype the tier sized for, passed beside kvtier's
    --kv-transfer-config (the target passes none).
    `scheduler_configmap`: the ConfigMap the target's `spec.router.scheduler.config.ref` names,
    as read in the target's namespace (None when there is none); its scorer is written last.
    `picker_layout`: whether the endpoint picker keeps the index in the producer plugin, as
    render/picker_version.py resolves it from the LLMInferenceServiceConfigs read (None: none
    were read)."""
    writes: list[DesiredWrite] = []
    notes: list[str] = []
    disk_spec = spec.disk
    disk: SharedClaim | PerPodClaim | None = None
    seed = None
    object_store_secret: str | None = None
    block_bytes = sizing.sizing.block_bytes
    nvme_evictor: EvictorSettings | None = None
    if sizing.disk == "NVMe":
        pool = settings.nvme_pool
        if pool is None:
            named = disk_spec.nvme.pool if disk_spec and disk_spec.nvme else None
            raise RenderError(
                "NVMePoolNotFound",
                f"the KVCachePolicy defines no NVMe pool {named}"
                if named
                else "an NVMe tier needs spec.disk.nvme.pool",
            )
        requested = disk_spec.nvme.size if disk_spec and disk_spec.nvme else None
        capacity = nvme_capacity_bytes(
            None if requested is None else quantity_bytes(requested), pool
        )
        disk = PerPodClaim(spec=nvme_claim_spec(tier, pool, capacity))
        if evictor_image is not None:
            nvme_evictor = evictor_settings(settings, evictor_image, capacity, block_bytes)
        if pool.storage_class_name is not None:
            notes.append(class_pool_note(pool.name, pool.storage_class_name))
        else:
            volumes = nvme_volumes(tier, pool, nodes, capacity)
            writes += [nvme_storage_class(pool), *volumes]
            notes.append(
                f"NVMe PVs have reclaim policy Retain; retention {pool.retention.value}: "
                + (
                    "the operator deletes them with the tier"
                    if pool.retention is Retention.DELETE
                    else "they stay after the tier is deleted"
                )
            )
            if replicas > len(volumes):
                notes.append(
                    f"{replicas} replicas but {len(volumes)} eligible node(s): each node holds "
                    "one PV per tier, so replicas beyond that stay Pending"
                )
    elif sizing.disk == "CephFS":
        requested = disk_spec.cephfs.size if disk_spec and disk_spec.cephfs else None
        size = cephfs_size_bytes(
            None if requested is None else quantity_bytes(requested), sizing.sizing
        )
        claim = cephfs_claim(
            tier, cephfs_storage_class_name(settings), size, settings.storage_retention.value
        )
        writes += [*replica1_writes(settings), claim]
        disk = SharedClaim(claim.name)
        if evictor_image is not None and tier.uid is not None:  # owned by the tier: its uid
            evictor = evictor_settings(settings, evictor_image, size, block_bytes)
            writes.append(cephfs_evictor_write(tier, claim.name, evictor))
        if replicas > 1 and sizing.shared_hash_seed:
            seed = python_hash_seed(tier.namespace, tier.name)
    elif sizing.disk == "ObjectStore":
        # A bucket: nothing to provision. The keys reach vLLM by reference only.
        store = disk_spec.object_store if disk_spec else None
        ref = store.credentials_secret_ref if store else None
        object_store_secret = ref.name if ref else None
        if object_store_secret is None and sizing.release.object_store_keys_in_config:
            raise RenderError(
                "ObjectStoreCredentialsRequired",
                f"spec.disk.objectStore.credentialsSecretRef: vLLM {sizing.release.series}'s "
                "obj tier requires access keys; name the Secret that holds AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY",
            )
        notes.append(
            f"obj tier: keys from Secret {object_store_secret} by reference (env valueFrom); "
            "kvtier never reads it"
            if object_store_secret
            else "obj tier: no credentials Secret; vLLM's AWS SDK uses its default chain "
            "(e.g. a workload identity)"
        )
    elif sizing.disk is not None:
        raise RenderError(
            "DiskTypeNotSupported", f"Apply mode cannot provision a {sizing.disk} tier yet"
        )

    if sizing.clear_stale_shm_file:
        notes.append(
            f"vLLM {sizing.release.series} leaves {SHM_FILES} behind when a worker is killed: "
            "a postStart hook on the vLLM container removes it on every start, before vLLM "
            "maps its tier (a hook of the user's own is kept, and the file is then not removed)"
        )
    figures = sizing.sizing
    offload = Offload(
        plan=plan_offload(
            sizing.connector,
            figures.cpu_bytes_to_use,
            figures.pod_memory_bytes,
            figures.shm_bytes,
        ),
        disk=disk,
        disk_label=sizing.disk,
        eviction_policy=sizing.input.eviction_policy,
        mount_path=sizing.input.fs_root_dir,
        python_hash_seed=seed,
        clear_stale_shm_file=sizing.clear_stale_shm_file,
        kv_cache_dtype=kv_cache_dtype_flag,
        object_store_secret=object_store_secret,
        roles=tuple(roles),
        evictor=nvme_evictor,
    )
    # No configs read: the target's own annotation, else what KServe does without its
    # scheduler preset (render/picker_version.py).
    layout = picker_layout if picker_layout is not None else layout_of(target, {})
    kind = target_kind(target)  # RenderError for a target no registered kind writes
    scheduler = kind.scheduler(target, offload, layout) or configmap_sync(
        target, scheduler_configmap, offload.role_offloads(), tier.id, layout
    )
    patch = kind.writes(target, offload, scheduler)
    if isinstance(patch, Conflict):
        return RenderResult(conflict=patch.message)
    if isinstance(scheduler, SchedulerSync) and scheduler_configmap is not None:
        patch += configmap_writes(scheduler_configmap, scheduler, tier.id)
    return RenderResult(writes=[*writes, *patch], notes=notes, scheduler=scheduler)


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
