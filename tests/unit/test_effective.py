"""Effective settings: built-in default < KVCachePolicy < KVCacheTier, with provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from kvtier.api.policy import KVCachePolicy, KVCachePolicySpec, Retention, VolumeSource
from kvtier.api.tier import (
    DiskType,
    EffectiveValue,
    KVCacheDtype,
    KVCacheTierSpec,
    Mode,
    ValueSource,
)
from kvtier.settings import BUILTIN_DEFAULTS, effective_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEFAULT, POLICY, TIER = ValueSource.DEFAULT, ValueSource.POLICY, ValueSource.TIER


def _tier(**spec: Any) -> KVCacheTierSpec:
    base: dict[str, Any] = {
        "targetRef": {"kind": "LLMInferenceService", "name": "llm"},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
    }
    return KVCacheTierSpec.model_validate({**base, **spec})


def _policy(**spec: Any) -> KVCachePolicySpec:
    return KVCachePolicySpec.model_validate(spec)


def test_missing_policy_means_builtin_defaults() -> None:
    settings = effective_settings(_tier(), None)
    assert settings.mode.value is Mode.APPLY
    assert settings.kv_cache_dtype.value is KVCacheDtype.AUTO
    assert settings.block_size_tokens.value == 16
    assert settings.cpu_size.value == "auto"
    assert settings.disk_type.value is DiskType.AUTO
    assert settings.probe_enabled.value is True
    assert settings.probe_runtime_seconds.value == 60
    assert settings.memory_overhead_factor.value == 2.0
    assert settings.memory_headroom_bytes.value == 4 * 2**30
    assert settings.max_node_memory_fraction.value == 0.5
    assert settings.object_store_allowed.value is False
    assert settings.cephfs_storage_class.value == "ocs-storagecluster-cephfs"
    assert settings.cephfs_throughput_ceiling_bytes_per_second.value == 205_000_000
    assert settings.replica1_ceph_namespace.value == "openshift-storage"
    assert settings.replica1_filesystem.value == "kvtier-kvcache"
    assert settings.replica1_csi_driver.value == "openshift-storage.cephfs.csi.ceph.com"
    assert settings.replica1_cluster_id.value == "openshift-storage"
    assert settings.storage_retention.value is Retention.DELETE
    assert settings.nvme_pool is None
    assert {row.source for row in settings.entries()} == {DEFAULT}


def test_empty_policy_is_the_same_as_none() -> None:
    assert effective_settings(_tier(), _policy()) == effective_settings(_tier(), None)


def test_policy_overrides_defaults() -> None:
    policy = _policy(
        defaults={
            "mode": "Plan",
            "kvCacheDtype": "fp8",
            "diskType": "None",
            "probe": {"enabled": False},
        },
        memory={"headroom": "8Gi", "overheadFactor": 1.5},
        objectStore={"allowed": True},
        nonBeneficialTier="Drop",
    )
    settings = effective_settings(_tier(), policy)
    assert (settings.mode.value, settings.mode.source) == (Mode.PLAN, POLICY)
    assert (settings.kv_cache_dtype.value, settings.kv_cache_dtype.source) == (
        KVCacheDtype.FP8,
        POLICY,
    )
    assert (settings.disk_type.value, settings.disk_type.source) == (DiskType.NONE, POLICY)
    assert (settings.probe_enabled.value, settings.probe_enabled.source) == (False, POLICY)
    assert settings.probe_runtime_seconds.source is DEFAULT
    assert (settings.memory_headroom_bytes.value, settings.memory_headroom_bytes.source) == (
        8 * 2**30,
        POLICY,
    )
    assert settings.memory_overhead_factor.value == 1.5
    assert settings.object_store_allowed.value is True
    assert settings.max_node_memory_fraction.source is DEFAULT


def test_tier_overrides_policy() -> None:
    policy = _policy(
        defaults={"mode": "Plan", "blockSizeTokens": 32, "probe": {"runtimeSeconds": 30}}
    )
    tier = _tier(mode="Apply", model={"blockSizeTokens": 64}, probe={"runtimeSeconds": 120})
    settings = effective_settings(tier, policy)
    assert (settings.mode.value, settings.mode.source) == (Mode.APPLY, TIER)
    assert (settings.block_size_tokens.value, settings.block_size_tokens.source) == (64, TIER)
    assert (settings.probe_runtime_seconds.value, settings.probe_runtime_seconds.source) == (
        120,
        TIER,
    )


def test_nvme_pool_resolution_fills_pool_defaults() -> None:
    pool = {"name": "local-nvme", "mountPath": "/mnt/nvme", "capacityPerNode": "3Ti"}
    policy = _policy(nvmePools=[pool], storageRetention="Retain")
    settings = effective_settings(
        _tier(disk={"type": "NVMe", "nvme": {"pool": "local-nvme"}}), policy
    )
    assert settings.nvme_pool is not None
    assert settings.nvme_pool.capacity_per_node_bytes == 3 * 2**40
    assert settings.nvme_pool.volume_source is VolumeSource.LOCAL
    assert settings.nvme_pool.retention is Retention.RETAIN  # the policy-wide retention
    assert settings.nvme_pool.node_selector == {}


def test_unknown_nvme_pool_resolves_to_none() -> None:
    settings = effective_settings(_tier(disk={"type": "NVMe", "nvme": {"pool": "nope"}}), None)
    assert settings.nvme_pool is None


def test_replica1_rook_namespace_drives_driver_and_cluster_id() -> None:
    policy = _policy(
        cephfs={
            "storageClassName": "rook-cephfs",
            "replica1": {"enabled": True, "cephClusterNamespace": "rook-ceph"},
        }
    )
    settings = effective_settings(_tier(), policy)
    assert settings.replica1_ceph_namespace.value == "rook-ceph"
    assert settings.replica1_ceph_namespace.source is POLICY
    # Rook's CSI driver and clusterID follow the namespace unless the policy names them.
    assert settings.replica1_csi_driver.value == "rook-ceph.cephfs.csi.ceph.com"
    assert settings.replica1_csi_driver.source is DEFAULT
    assert settings.replica1_cluster_id.value == "rook-ceph"
    assert settings.replica1_storage_class.value == "rook-cephfs-kvcache"
    assert settings.replica1_storage_class.source is DEFAULT


def test_replica1_odf_upgraded_cluster_id_and_driver() -> None:
    policy = _policy(
        cephfs={
            "replica1": {
                "enabled": True,
                "clusterID": "0a1b2c3d4e5f",
                "csiDriver": "openshift-storage.cephfs.csi.ceph.com",
            }
        }
    )
    settings = effective_settings(_tier(), policy)
    assert settings.replica1_cluster_id.value == "0a1b2c3d4e5f"
    assert settings.replica1_cluster_id.source is POLICY
    assert settings.replica1_csi_driver.source is POLICY
    fields = {row.field for row in settings.entries()}
    assert {"cephfs.replica1.clusterID", "cephfs.replica1.csiDriver"} <= fields


def test_entries_are_stable_unique_and_fit_the_status_schema() -> None:
    policy = KVCachePolicy.model_validate(
        yaml.safe_load((EXAMPLES / "kvcachepolicy.yaml").read_text())
    )
    tier = _tier(mode="Plan", disk={"type": "NVMe", "nvme": {"pool": "local-nvme"}})
    rows = effective_settings(tier, policy.spec).entries()
    fields = [row.field for row in rows]
    assert len(fields) == len(set(fields)) <= 64
    assert fields == [row.field for row in effective_settings(tier, policy.spec).entries()]
    by_field = {row.field: row for row in rows}
    assert (by_field["mode"].value, by_field["mode"].source) == ("Plan", TIER)
    assert by_field["probe.enabled"].value == "true"
    assert by_field["disk.nvme.pool"].value == "local-nvme"
    assert by_field["memory.headroom"].value == str(4 * 2**30)
    # Each row is a valid status.effective entry.
    rendered = [EffectiveValue(**row._asdict()).to_k8s() for row in rows]
    assert all(row["source"] in {"Default", "Policy", "Tier"} for row in rendered)


def test_builtin_defaults_are_valid_policy_values() -> None:
    """The built-in defaults would pass admission if a platform team wrote them down."""
    d = BUILTIN_DEFAULTS
    assert KVCachePolicySpec.model_validate(
        {
            "defaults": {
                "mode": d.mode,
                "kvCacheDtype": d.kv_cache_dtype,
                "blockSizeTokens": d.block_size_tokens,
                "diskType": d.disk_type,
                "probe": {"enabled": d.probe_enabled, "runtimeSeconds": d.probe_runtime_seconds},
            },
            "memory": {
                "overheadFactor": d.memory_overhead_factor,
                "headroom": d.memory_headroom,
                "maxNodeFraction": d.max_node_memory_fraction,
            },
            "objectStore": {
                "allowed": d.object_store_allowed,
                "maxP99Seconds": d.object_store_max_p99_seconds,
            },
            "cephfs": {
                "storageClassName": d.cephfs_storage_class,
                "throughputCeiling": d.cephfs_throughput_ceiling,
            },
        }
    )


modes = st.sampled_from(list(Mode)) | st.none()
dtypes = st.sampled_from(list(KVCacheDtype)) | st.none()
blocks = st.sampled_from([16, 32, 64]) | st.none()


@given(
    tier_mode=modes,
    policy_mode=modes,
    tier_dtype=dtypes,
    policy_dtype=dtypes,
    tier_block=blocks,
    policy_block=blocks,
)
def test_precedence_property(
    tier_mode: Mode | None,
    policy_mode: Mode | None,
    tier_dtype: KVCacheDtype | None,
    policy_dtype: KVCacheDtype | None,
    tier_block: int | None,
    policy_block: int | None,
) -> None:
    tier = KVCacheTierSpec.model_validate(
        {
            "targetRef": {"kind": "InferenceService", "name": "llm"},
            "workload": {"averageContextTokens": 1, "concurrentSessions": 1},
            "mode": tier_mode,
            "model": {"kvCacheDtype": tier_dtype, "blockSizeTokens": tier_block},
        }
    )
    policy = KVCachePolicySpec.model_validate(
        {
            "defaults": {
                "mode": policy_mode,
                "kvCacheDtype": policy_dtype,
                "blockSizeTokens": policy_block,
            }
        }
    )
    settings = effective_settings(tier, policy)
    for got, tier_value, policy_value, default in (
        (settings.mode, tier_mode, policy_mode, BUILTIN_DEFAULTS.mode),
        (settings.kv_cache_dtype, tier_dtype, policy_dtype, BUILTIN_DEFAULTS.kv_cache_dtype),
        (settings.block_size_tokens, tier_block, policy_block, BUILTIN_DEFAULTS.block_size_tokens),
    ):
        if tier_value is not None:
            assert (got.value, got.source) == (tier_value, TIER)
        elif policy_value is not None:
            assert (got.value, got.source) == (policy_value, POLICY)
        else:
            assert (got.value, got.source) == (default, DEFAULT)


def test_policy_and_default_values_are_shared_between_tiers() -> None:
    """Each tier kept parsed holds its settings; a value from the policy or the built-in
    defaults is one frozen Sourced for all of them, told apart by type and float text."""
    from kvtier.settings import _shared

    def spec(name: str) -> KVCacheTierSpec:
        return KVCacheTierSpec.model_validate(
            {
                "targetRef": {"kind": "InferenceService", "name": name},
                "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
            }
        )

    first, second = effective_settings(spec("a"), None), effective_settings(spec("b"), None)
    assert first == second
    assert first.kv_cache_dtype is second.kv_cache_dtype
    assert _shared(True, ValueSource.DEFAULT) is not _shared(1, ValueSource.DEFAULT)
    assert _shared(-0.0, ValueSource.DEFAULT).value.hex() == (-0.0).hex()
    assert _shared(0.0, ValueSource.POLICY) is not _shared(0.0, ValueSource.DEFAULT)
    assert _shared([1], ValueSource.DEFAULT) is not _shared([1], ValueSource.DEFAULT)
