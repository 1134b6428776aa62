"""Effective settings of a KVCacheTier: built-in default < KVCachePolicy < KVCacheTier.

Every value carries its source so status.effective can tell users why a value is what it is.
The CRDs carry no schema defaults for exactly this reason: the built-in defaults live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Generic, NamedTuple, TypeVar

from kvtier.api.common import quantity_bytes
from kvtier.api.policy import (
    CephFSPolicy,
    EvictionPolicy,
    KVCachePolicySpec,
    MemoryPolicy,
    NonBeneficialAction,
    NVMePool,
    ObjectStorePolicy,
    ProbeDefaults,
    ProbingPolicy,
    Replica1Pool,
    Retention,
    TierDefaults,
    VolumeSource,
)
from kvtier.api.tier import (
    CPUSpec,
    DiskSpec,
    DiskType,
    KVCacheDtype,
    KVCacheTierSpec,
    Mode,
    ModelSpec,
    ProbeSpec,
    ValueSource,
)
from kvtier.evict.policy import DEFAULT_HIGH, DEFAULT_LOW, DEFAULT_PROTECT_SECONDS
from kvtier.evict.run import DEFAULT_INTERVAL_SECONDS
from kvtier.sizing.releases import DEFAULT_VLLM_VERSION

T = TypeVar("T")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A value and where it came from."""

    value: T
    source: ValueSource


@dataclass(frozen=True)
class BuiltinDefaults:
    """Every built-in default, in one place; a missing KVCachePolicy means exactly these."""

    mode: Mode = Mode.APPLY
    kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO
    block_size_tokens: int = 16  # vLLM's GPU block size; offload blocks must be a multiple
    vllm_version: str = DEFAULT_VLLM_VERSION  # the study's release
    cpu_size: int | str = "auto"
    disk_type: DiskType = DiskType.AUTO
    probe_enabled: bool = True
    probe_runtime_seconds: int = 60
    probe_schedule: str | None = None  # probe once after provisioning
    probe_allow_while_serving: bool = False
    memory_overhead_factor: float = 2.0  # pinned + shared buffers reach ~1.9x the tier
    memory_headroom: int | str = "4Gi"
    max_node_memory_fraction: float = 0.5
    object_store_allowed: bool = False  # p99 of an S3 tier lands directly in TTFT
    object_store_max_p99_seconds: float = 0.25
    cephfs_storage_class: str = "ocs-storagecluster-cephfs"
    cephfs_throughput_ceiling: int | str = "205M"  # CephFS protocol ceiling seen on ODF 4.18
    replica1_enabled: bool = False
    # ODF's Ceph cluster namespace; on ODF it also names the Rook operator's CSI driver.
    ceph_cluster_namespace: str = "openshift-storage"
    replica1_filesystem_name: str = "kvtier-kvcache"  # kvtier's own CephFilesystem
    replica1_pool_name: str = "kvcache"
    non_beneficial_tier: NonBeneficialAction = NonBeneficialAction.KEEP
    storage_retention: Retention = Retention.DELETE  # tier data is only cache
    nvme_volume_source: VolumeSource = VolumeSource.LOCAL
    # The disk-tier evictor's, as `kvtier evict` has them.
    eviction_high_watermark: float = DEFAULT_HIGH
    eviction_low_watermark: float = DEFAULT_LOW
    eviction_protect_seconds: int = DEFAULT_PROTECT_SECONDS
    eviction_interval_seconds: int = int(DEFAULT_INTERVAL_SECONDS)


BUILTIN_DEFAULTS = BuiltinDefaults()


@dataclass(frozen=True)
class NVMePoolSettings:
    """An NVMe pool from the KVCachePolicy with its own defaults filled in."""

    name: str
    mount_path: str | None  # a pool of kvtier-made local PVs; None for a StorageClass pool
    node_selector: Mapping[str, str]
    capacity_per_node_bytes: int
    volume_source: VolumeSource
    retention: Retention
    # A dynamic local provisioner's class: per-pod claims of it, no PVs of kvtier's own.
    storage_class_name: str | None = None


def _path(path: str) -> dict[str, str]:
    return {"path": path}


class EffectiveRow(NamedTuple):
    """One status.effective row (api.tier.EffectiveValue's fields): the same few recur in
    every tier's settings, so each is validated and serialised once (policy/parse_cache.py)."""

    field: str
    value: str
    source: ValueSource


@dataclass(frozen=True)
class EffectiveSettings:
    """Effective values; each field's `path` metadata names it in status.effective (a
    KVCacheTier spec path when a tier may set it, else a KVCachePolicy spec path)."""

    mode: Sourced[Mode] = field(metadata=_path("mode"))
    kv_cache_dtype: Sourced[KVCacheDtype] = field(metadata=_path("model.kvCacheDtype"))
    block_size_tokens: Sourced[int] = field(metadata=_path("model.blockSizeTokens"))
    vllm_version: Sourced[str] = field(metadata=_path("model.vllmVersion"))
    cpu_size: Sourced[int | str] = field(metadata=_path("cpu.size"))
    disk_type: Sourced[DiskType] = field(metadata=_path("disk.type"))
    probe_enabled: Sourced[bool] = field(metadata=_path("probe.enabled"))
    probe_runtime_seconds: Sourced[int] = field(metadata=_path("probe.runtimeSeconds"))
    probe_schedule: Sourced[str | None] = field(metadata=_path("probing.schedule"))
    probe_allow_while_serving: Sourced[bool] = field(metadata=_path("probing.allowWhileServing"))
    memory_overhead_factor: Sourced[float] = field(metadata=_path("memory.overheadFactor"))
    memory_headroom_bytes: Sourced[int] = field(metadata=_path("memory.headroom"))
    max_node_memory_fraction: Sourced[float] = field(metadata=_path("memory.maxNodeFraction"))
    object_store_allowed: Sourced[bool] = field(metadata=_path("objectStore.allowed"))
    object_store_max_p99_seconds: Sourced[float] = field(
        metadata=_path("objectStore.maxP99Seconds")
    )
    cephfs_storage_class: Sourced[str] = field(metadata=_path("cephfs.storageClassName"))
    cephfs_throughput_ceiling_bytes_per_second: Sourced[int] = field(
        metadata=_path("cephfs.throughputCeiling")
    )
    replica1_enabled: Sourced[bool] = field(metadata=_path("cephfs.replica1.enabled"))
    replica1_ceph_namespace: Sourced[str] = field(
        metadata=_path("cephfs.replica1.cephClusterNamespace")
    )
    replica1_filesystem: Sourced[str] = field(metadata=_path("cephfs.replica1.filesystemName"))
    replica1_pool_name: Sourced[str] = field(metadata=_path("cephfs.replica1.poolName"))
    replica1_storage_class: Sourced[str] = field(metadata=_path("cephfs.replica1.storageClassName"))
    replica1_csi_driver: Sourced[str] = field(metadata=_path("cephfs.replica1.csiDriver"))
    replica1_cluster_id: Sourced[str] = field(metadata=_path("cephfs.replica1.clusterID"))
    non_beneficial_tier: Sourced[NonBeneficialAction] = field(metadata=_path("nonBeneficialTier"))
    storage_retention: Sourced[Retention] = field(metadata=_path("storageRetention"))
    eviction_high_watermark: Sourced[float] = field(metadata=_path("eviction.highWatermark"))
    eviction_low_watermark: Sourced[float] = field(metadata=_path("eviction.lowWatermark"))
    eviction_protect_seconds: Sourced[int] = field(metadata=_path("eviction.protectSeconds"))
    eviction_interval_seconds: Sourced[int] = field(metadata=_path("eviction.intervalSeconds"))
    # The policy's pool that spec.disk.nvme.pool names; None when the tier names none or the
    # policy lacks it (the operator reports the latter as PolicyCompliant=False).
    nvme_pool: NVMePoolSettings | None = field(default=None, metadata=_path("disk.nvme.pool"))

    def entries(self) -> list[EffectiveRow]:
        """status.effective rows, in a stable order."""
        rows = []
        for name, path in _ROW_FIELDS:
            item = getattr(self, name)
            if isinstance(item, Sourced):
                rows.append(EffectiveRow(path, _text(item.value), item.source))
            elif isinstance(item, NVMePoolSettings):
                rows.append(EffectiveRow(path, item.name, ValueSource.TIER))
        return rows


# Each field's name and its status.effective path, in order (dataclasses.fields is slow).
_ROW_FIELDS = tuple((f.name, str(f.metadata["path"])) for f in fields(EffectiveSettings))


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, StrEnum):
        return value.value
    return str(value)


def _pick(tier: T | None, policy: T | None, default: T) -> Sourced[T]:
    if tier is not None:
        return Sourced(tier, ValueSource.TIER)
    if policy is not None:
        return _shared(policy, ValueSource.POLICY)
    return _shared(default, ValueSource.DEFAULT)


# The policy's and the built-in values, one Sourced each for every tier's settings (they are
# frozen): the same few dozen recur in every tier the operator keeps parsed.
_SHARED: dict[tuple[type, object, ValueSource], Sourced[Any]] = {}
SHARED_KEPT = 1024


def _shared(value: T, source: ValueSource) -> Sourced[T]:
    try:
        # By type (True is not 1) and, for a float, by its text (-0.0 is not 0.0).
        key = (type(value), repr(value) if isinstance(value, float) else value, source)
        hit = _SHARED.get(key)
    except TypeError:  # not hashable: its own
        return Sourced(value, source)
    if hit is None:
        if len(_SHARED) >= SHARED_KEPT:
            _SHARED.clear()
        hit = _SHARED[key] = Sourced(value, source)
    return hit


def with_target_vllm_version(
    eff: EffectiveSettings, image_version: str | None
) -> EffectiveSettings:
    """The target's own image outranks a policy default or the built-in one, not the tier."""
    if image_version is None or eff.vllm_version.source is ValueSource.TIER:
        return eff
    return replace(eff, vllm_version=Sourced(image_version, ValueSource.TARGET))


def _policy_only(policy: T | None, default: T) -> Sourced[T]:
    return _pick(None, policy, default)


def _bytes(value: Sourced[int | str]) -> Sourced[int]:
    return Sourced(quantity_bytes(value.value), value.source)


def _nvme_pool(
    name: str | None, pools: list[NVMePool], retention: Retention, defaults: BuiltinDefaults
) -> NVMePoolSettings | None:
    pool = next((p for p in pools if p.name == name), None)
    if pool is None:
        return None
    return NVMePoolSettings(
        name=pool.name,
        mount_path=pool.mount_path,
        node_selector=dict(pool.node_selector or {}),
        capacity_per_node_bytes=quantity_bytes(pool.capacity_per_node),
        volume_source=pool.volume_source or defaults.nvme_volume_source,
        retention=pool.retention or retention,
        storage_class_name=pool.storage_class_name,
    )


def effective_settings(
    tier_spec: KVCacheTierSpec,
    policy_spec: KVCachePolicySpec | None,
    defaults: BuiltinDefaults = BUILTIN_DEFAULTS,
) -> EffectiveSettings:
    """Merge a KVCacheTier spec with the KVCachePolicy (None: there is none) and the defaults."""
    model = tier_spec.model or ModelSpec()
    cpu = tier_spec.cpu or CPUSpec()
    disk = tier_spec.disk or DiskSpec()
    probe = tier_spec.probe or ProbeSpec()

    policy = policy_spec or KVCachePolicySpec()
    tier_defaults = policy.defaults or TierDefaults()
    probe_defaults = tier_defaults.probe or ProbeDefaults()
    probing = policy.probing or ProbingPolicy()
    memory = policy.memory or MemoryPolicy()
    object_store = policy.object_store or ObjectStorePolicy()
    cephfs = policy.cephfs or CephFSPolicy()
    replica1 = cephfs.replica1 or Replica1Pool()
    eviction = policy.eviction or EvictionPolicy()

    cephfs_class = _policy_only(cephfs.storage_class_name, defaults.cephfs_storage_class)
    pool_name = _policy_only(replica1.pool_name, defaults.replica1_pool_name)
    ceph_namespace = _policy_only(replica1.ceph_cluster_namespace, defaults.ceph_cluster_namespace)
    retention = _policy_only(policy.storage_retention, defaults.storage_retention)
    return EffectiveSettings(
        mode=_pick(tier_spec.mode, tier_defaults.mode, defaults.mode),
        kv_cache_dtype=_pick(
            model.kv_cache_dtype, tier_defaults.kv_cache_dtype, defaults.kv_cache_dtype
        ),
        block_size_tokens=_pick(
            model.block_size_tokens, tier_defaults.block_size_tokens, defaults.block_size_tokens
        ),
        vllm_version=_pick(model.vllm_version, tier_defaults.vllm_version, defaults.vllm_version),
        cpu_size=_pick(cpu.size, None, defaults.cpu_size),
        disk_type=_pick(disk.type, tier_defaults.disk_type, defaults.disk_type),
        probe_enabled=_pick(probe.enabled, probe_defaults.enabled, defaults.probe_enabled),
        probe_runtime_seconds=_pick(
            probe.runtime_seconds, probe_defaults.runtime_seconds, defaults.probe_runtime_seconds
        ),
        probe_schedule=_policy_only(probing.schedule, defaults.probe_schedule),
        probe_allow_while_serving=_policy_only(
            probing.allow_while_serving, defaults.probe_allow_while_serving
        ),
        memory_overhead_factor=_policy_only(
            memory.overhead_factor, defaults.memory_overhead_factor
        ),
        memory_headroom_bytes=_bytes(_policy_only(memory.headroom, defaults.memory_headroom)),
        max_node_memory_fraction=_policy_only(
            memory.max_node_fraction, defaults.max_node_memory_fraction
        ),
        object_store_allowed=_policy_only(object_store.allowed, defaults.object_store_allowed),
        object_store_max_p99_seconds=_policy_only(
            object_store.max_p99_seconds, defaults.object_store_max_p99_seconds
        ),
        cephfs_storage_class=cephfs_class,
        cephfs_throughput_ceiling_bytes_per_second=_bytes(
            _policy_only(cephfs.throughput_ceiling, defaults.cephfs_throughput_ceiling)
        ),
        replica1_enabled=_policy_only(replica1.enabled, defaults.replica1_enabled),
        replica1_ceph_namespace=ceph_namespace,
        replica1_filesystem=_policy_only(
            replica1.filesystem_name, defaults.replica1_filesystem_name
        ),
        replica1_pool_name=pool_name,
        # Derived from the class and pool names unless the policy names a class.
        replica1_storage_class=_policy_only(
            replica1.storage_class_name, f"{cephfs_class.value}-{pool_name.value}"
        ),
        # Rook names its CephFS CSI driver after the operator's namespace, and the clusterID
        # after the cluster's; both are that one namespace on ODF and in Rook's examples.
        replica1_csi_driver=_policy_only(
            replica1.csi_driver, f"{ceph_namespace.value}.cephfs.csi.ceph.com"
        ),
        replica1_cluster_id=_policy_only(replica1.cluster_id, ceph_namespace.value),
        non_beneficial_tier=_policy_only(policy.non_beneficial_tier, defaults.non_beneficial_tier),
        storage_retention=retention,
        eviction_high_watermark=_policy_only(
            eviction.high_watermark, defaults.eviction_high_watermark
        ),
        eviction_low_watermark=_policy_only(
            eviction.low_watermark, defaults.eviction_low_watermark
        ),
        eviction_protect_seconds=_policy_only(
            eviction.protect_seconds, defaults.eviction_protect_seconds
        ),
        eviction_interval_seconds=_policy_only(
            eviction.interval_seconds, defaults.eviction_interval_seconds
        ),
        nvme_pool=_nvme_pool(
            disk.nvme.pool if disk.nvme else None,
            policy.nvme_pools or [],
            retention.value,
            defaults,
        ),
    )


def nvme_pools(
    policy_spec: KVCachePolicySpec | None, defaults: BuiltinDefaults = BUILTIN_DEFAULTS
) -> list[NVMePoolSettings]:
    """Every NVMe pool the policy defines, with its effective settings."""
    if policy_spec is None:
        return []
    pools = policy_spec.nvme_pools or []
    retention = policy_spec.storage_retention or defaults.storage_retention
    found = (_nvme_pool(p.name, pools, retention, defaults) for p in pools)
    return [p for p in found if p is not None]
