"""The full plan: CPU tier, topology, restore vs recompute, vLLM config, fio, status shape."""

import json
from typing import Any

import pytest

from kvtier.sizing import (
    ModelGeometry,
    SizingError,
    SizingInput,
    assess_tier,
    choose_topology,
    crossover_tokens,
    fio_args,
    fio_block_size,
    kv_transfer_config,
    kv_transfer_config_arg,
    lookup_model,
    plan,
)

GB = 10**9
GiB = 2**30
LLAMA_70B = lookup_model("llama-3.1-70b")


def _input(**changes: Any) -> SizingInput:
    base: dict[str, Any] = {
        "geometry": LLAMA_70B,
        "tensor_parallel_size": 8,
        "average_context_tokens": 131_072,
    }
    return SizingInput(**{**base, **changes})


def test_study_llama_70b_64gb_cpu_tier() -> None:
    result = plan(_input(cpu_bytes=64 * GB))
    s = result.sizing
    assert s.bytes_per_token == 327_680
    assert s.bytes_per_token_per_rank == 40_960
    assert s.block_bytes == 5_242_880
    assert s.working_set_bytes == 40 * GiB
    assert s.cpu_bytes_to_use == 64 * GB
    assert s.contexts_in_cpu == 1.49  # "holds only ~1.5 such contexts"
    assert s.fits_in_cpu
    assert s.topology == "CPUOnly"


def test_status_shape_is_exactly_the_crd_fields() -> None:
    from kvtier.api.tier import SizingStatus, TierStatus

    def wire(model: Any) -> set[str]:
        return {f.alias or name for name, f in model.model_fields.items()}

    status = plan(_input(cpu_bytes=64 * GB, concurrent_sessions=2)).to_status()
    assert list(status) == ["sizing", "tiers"]
    assert set(status["sizing"]) == wire(SizingStatus)
    (tier,) = status["tiers"]
    assert tier["name"] == "NVMe" and tier["beneficial"] is None  # not measured
    assert set(tier) <= wire(TierStatus)
    SizingStatus.model_validate(status["sizing"])
    json.dumps(status)  # plain JSON types only


def test_every_byte_figure_is_an_int() -> None:
    sizing = plan(_input(concurrent_sessions=7, node_memory_bytes=2 * 2**40)).as_dict()["sizing"]
    for key, value in sizing.items():
        if key in ("diskBytes", "shmBytes") and value is None:  # no disk tier, no shm file
            continue
        if key.endswith("Bytes") or key.startswith("bytes") or key == "cpuBytesToUse":
            assert type(value) is int, key


def test_auto_cpu_tier_is_the_working_set_in_whole_blocks() -> None:
    result = plan(_input(average_context_tokens=50_000, node_memory_bytes=2 * 2**40))
    s = result.sizing
    assert s.working_set_bytes == 327_680 * 50_000
    assert s.cpu_bytes_to_use % s.block_bytes == 0
    assert s.working_set_bytes <= s.cpu_bytes_to_use < s.working_set_bytes + s.block_bytes
    assert s.fits_in_cpu and s.topology == "CPUOnly"


def test_auto_cpu_tier_is_capped_by_node_memory() -> None:
    # 64 sessions of 128K: 2.5 TiB per replica, far beyond a 2 TiB node's share.
    inp = _input(concurrent_sessions=64, node_memory_bytes=2 * 2**40)
    result = plan(inp)
    cap = (2 * 2**40 // 2 - 4 * GiB) // 2  # half the node, − headroom, ÷ overhead 2.0
    assert result.sizing.cpu_bytes_to_use == cap // 5_242_880 * 5_242_880
    assert not result.sizing.fits_in_cpu
    assert result.sizing.topology == "CPUAndNVMe"
    assert "capped" in result.decisions["cpuBytesToUse"]


def test_pods_per_node_share_the_cap() -> None:
    one = plan(_input(concurrent_sessions=64, node_memory_bytes=2 * 2**40))
    four = plan(
        _input(concurrent_sessions=64, node_memory_bytes=2 * 2**40, model_server_pods_per_node=4)
    )
    assert four.sizing.cpu_bytes_to_use < one.sizing.cpu_bytes_to_use // 3


def test_pod_memory_and_shm() -> None:
    s = plan(_input(cpu_bytes=64 * GB, memory_overhead_factor=1.9, headroom_bytes=GiB)).sizing
    assert s.pod_memory_bytes == 121_600_000_000 + GiB
    assert s.shm_bytes is None  # 0.24 keeps a CPU-only tier in private pinned memory


def test_shm_holds_the_tier_where_the_release_puts_it() -> None:
    newer = plan(_input(cpu_bytes=64 * GB, headroom_bytes=GiB, vllm_version="0.33.0"))
    assert newer.sizing.shm_bytes == 64 * GB + GiB
    assert not newer.clear_stale_shm_file  # 0.33 unlinks the file once mapped
    tiering = plan(_input(cpu_bytes=64 * GB, headroom_bytes=GiB, disk_type="CephFS"))
    assert tiering.sizing.shm_bytes == 64 * GB + GiB  # TieringOffloadingSpec: /dev/shm in 0.24
    assert tiering.clear_stale_shm_file  # and 0.24 leaves it behind after an OOMKill


def test_data_parallel_engines_each_hold_a_tier() -> None:
    one = plan(_input(cpu_bytes=64 * GB, headroom_bytes=GiB, vllm_version="0.33"))
    two = plan(
        _input(cpu_bytes=64 * GB, headroom_bytes=GiB, vllm_version="0.33", data_parallel_size=2)
    )
    assert two.sizing.cpu_bytes_to_use == one.sizing.cpu_bytes_to_use  # per engine
    assert two.sizing.pod_memory_bytes - GiB == 2 * (one.sizing.pod_memory_bytes - GiB)
    assert two.sizing.shm_bytes == 2 * 64 * GB + GiB


def test_hash_seed_only_where_the_release_needs_it() -> None:
    assert plan(_input(disk_type="CephFS", replicas=2)).shared_hash_seed
    assert not plan(_input(disk_type="CephFS", replicas=2, vllm_version="0.33")).shared_hash_seed


def test_linear_attention_blocks_refused_where_vllm_cannot_build_them() -> None:
    from kvtier.sizing import lookup_model
    from kvtier.sizing.record import replace

    # Nemotron-Ultra's own blocks are attention or no-op (both releases build it); a NAS
    # layout with replace_with_linear attention blocks only 0.24's model code builds.
    nas = replace(lookup_model("nemotron-ultra-253b"), linear_attention_blocks=15)
    plan(SizingInput(nas, 50_000, tensor_parallel_size=8))  # 0.24 builds it
    with pytest.raises(SizingError) as exc:
        plan(SizingInput(nas, 50_000, tensor_parallel_size=8, vllm_version="0.33.0"))
    assert exc.value.field == "vllmVersion" and "replace_with_linear" in exc.value.message


def test_sessions_are_shared_by_replicas() -> None:
    result = plan(_input(cpu_bytes=64 * GB, concurrent_sessions=5, replicas=2))
    assert result.sessions_per_replica == 3
    assert result.sizing.working_set_bytes == 3 * 40 * GiB
    assert result.sizing.working_set_bytes_all_replicas == 5 * 40 * GiB
    assert result.sizing.topology == "CPUAndCephFS"


def test_no_node_memory_warns_that_auto_is_uncapped() -> None:
    assert any("node memory unknown" in w for w in plan(_input()).warnings)


def test_cpu_tier_smaller_than_gpu_kv_cache_warns() -> None:
    result = plan(_input(cpu_bytes=64 * GB, gpu_kv_cache_bytes=200 * GB))
    assert any("mirrors HBM" in w for w in result.warnings)
    # Estimated: 8 × 80 GB × 0.9 − 141 GB of weights = 435 GB of GPU KV cache.
    estimated = plan(
        _input(cpu_bytes=64 * GB, gpu_memory_bytes=80 * GB, model_weights_bytes=141 * GB)
    )
    assert any("435 GB" in w for w in estimated.warnings)
    # Unknown GPU KV cache: no warning, no guess.
    assert not any("mirrors" in w for w in plan(_input(cpu_bytes=64 * GB)).warnings)


@pytest.mark.parametrize(
    ("fits", "replicas", "available", "expected", "warns"),
    [
        (True, 1, {"NVMe", "CephFS"}, "CPUOnly", False),
        (True, 4, {"NVMe", "CephFS"}, "CPUOnly", False),
        (False, 1, {"NVMe", "CephFS"}, "CPUAndNVMe", False),
        (False, 3, {"NVMe", "CephFS"}, "CPUAndCephFS", False),
        (False, 1, {"CephFS"}, "CPUAndCephFS", True),
        (False, 3, {"NVMe"}, "CPUAndNVMe", True),
        (False, 3, {"ObjectStore"}, "CPUAndObjectStore", True),
        (False, 1, set(), "CPUOnly", True),
    ],
)
def test_topology_rules(
    fits: bool, replicas: int, available: set[str], expected: str, warns: bool
) -> None:
    decision = choose_topology(fits, replicas, frozenset(available))
    assert decision.topology == expected
    assert bool(decision.warnings) == warns


def test_object_store_only_when_explicitly_available() -> None:
    assert choose_topology(False, 3, {"NVMe", "CephFS", "ObjectStore"}).topology == "CPUAndCephFS"


def test_forced_and_disabled_disk() -> None:
    assert choose_topology(False, 1, {"NVMe"}, "None").topology == "CPUOnly"
    forced = choose_topology(True, 1, {"CephFS"}, "CephFS")
    assert forced.topology == "CPUAndCephFS" and forced.warnings
    with pytest.raises(SizingError) as err:
        choose_topology(False, 1, {"CephFS"}, "NVMe")
    assert err.value.field == "disk.type"


def test_crossover_worked_numbers() -> None:
    # t_prefill = 60 s / 50,000 tokens = 1.2 ms/token; L = T_p99 / t_prefill.
    assert crossover_tokens(0.6, 60, 50_000) == 500
    assert crossover_tokens(1.13, 60, 50_000) == 942  # 941.67 → 942
    assert crossover_tokens(0.012, 10, 50_000) == 60


def test_205_mb_per_s_at_5_mb_blocks_is_about_40_blocks_per_second() -> None:
    tier = assess_tier(
        "CephFS",
        selected=True,
        context_tokens=131_072,
        block_tokens=16,
        block_bytes=5_242_880,
        ttft_seconds=None,
        p99_seconds=None,
        bandwidth=205e6,
    )
    assert tier.restore_blocks_per_second is not None
    assert 39 <= tier.restore_blocks_per_second <= 41
    assert tier.restore_seconds == pytest.approx(8192 * 5_242_880 / 205e6, abs=1e-3)
    assert tier.beneficial is None  # no TTFT to compare with


def test_restore_wins_when_long_and_fast() -> None:
    result = plan(
        _input(
            average_context_tokens=50_000,
            cpu_bytes=64 * GB,
            concurrent_sessions=8,
            baseline_ttft_seconds=60,
            tier_p99_seconds={"NVMe": 0.02},
            tier_bandwidth_bytes_per_second={"NVMe": 6e9},
        )
    )
    (nvme,) = (t for t in result.tiers if t.name == "NVMe")
    assert nvme.selected and nvme.beneficial is True
    assert nvme.crossover_tokens == 17
    assert nvme.reason.startswith("restore wins")


def test_bandwidth_limit_loses_per_request_and_wins_under_load() -> None:
    result = plan(
        _input(
            cpu_bytes=64 * GB,
            concurrent_sessions=4,
            replicas=2,
            baseline_ttft_seconds=60,
            tier_p99_seconds={"CephFS": 1.13},
            tier_bandwidth_bytes_per_second={"CephFS": 205e6},
        )
    )
    (ceph,) = (t for t in result.tiers if t.selected)
    assert ceph.beneficial is True and ceph.decided_by == "throughput"
    assert ceph.latency is not None and ceph.latency.beneficial is False
    assert "takes" in ceph.latency.reason and "crossover" not in ceph.latency.reason


def test_both_views_losing_makes_recompute_win() -> None:
    # 500-token contexts: the 1.13 s tail costs more than the prefill a restore saves.
    result = plan(
        _input(
            average_context_tokens=500,
            disk_type="CephFS",
            cpu_bytes=64 * GB,
            concurrent_sessions=4,
            replicas=2,
            baseline_ttft_seconds=0.6,
            tier_p99_seconds={"CephFS": 1.13},
            tier_bandwidth_bytes_per_second={"CephFS": 205e6},
        )
    )
    (ceph,) = (t for t in result.tiers if t.selected)
    assert ceph.beneficial is False and ceph.decided_by == "both"
    assert any(w.startswith("CephFS tier: recompute wins") for w in result.warnings)


def test_object_store_gets_the_p99_tail_warning() -> None:
    result = plan(
        _input(
            cpu_bytes=64 * GB,
            concurrent_sessions=4,
            available_disk_types=frozenset({"ObjectStore"}),
            object_store_bucket="kv",
            object_store_endpoint="https://s3.example.com:9000",
        )
    )
    assert result.sizing.topology == "CPUAndObjectStore"
    assert any("p99" in w and "TTFT" in w for w in result.warnings)
    tier = result.kv_transfer_config["kv_connector_extra_config"]["secondary_tiers"][0]
    # vLLM 0.24's ObjStoreConfig requires the keys: Kubernetes expands them from the env.
    assert tier == {
        "type": "obj",
        "store_config": {
            "bucket": "kv",
            "endpoint_override": "s3.example.com:9000",
            "scheme": "https",
            "access_key": "$(AWS_ACCESS_KEY_ID)",
            "secret_key": "$(AWS_SECRET_ACCESS_KEY)",
        },
    }


def test_object_store_credentials_stay_in_the_env_where_the_release_reads_them() -> None:
    result = plan(
        _input(
            cpu_bytes=64 * GB,
            concurrent_sessions=4,
            available_disk_types=frozenset({"ObjectStore"}),
            object_store_bucket="kv",
            object_store_endpoint="http://minio.storage:9000/",
            vllm_version="0.33.0",
        )
    )
    tier = result.kv_transfer_config["kv_connector_extra_config"]["secondary_tiers"][0]
    assert tier["store_config"] == {
        "bucket": "kv",
        "endpoint_override": "minio.storage:9000",
        "scheme": "http",
    }


def test_object_store_without_bucket_is_refused() -> None:
    with pytest.raises(SizingError) as exc:
        plan(
            _input(
                cpu_bytes=64 * GB,
                disk_type="ObjectStore",
                available_disk_types=frozenset({"ObjectStore"}),
            )
        )
    assert exc.value.field == "disk.objectStore"


def test_vllm_config_cpu_only() -> None:
    config = kv_transfer_config(64 * GB, 16)
    assert kv_transfer_config_arg(config) == (
        '{"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
        '"kv_connector_extra_config":{"spec_name":"CPUOffloadingSpec",'
        '"cpu_bytes_to_use":64000000000,"block_size":16}}'
    )


def test_vllm_config_with_fs_tier() -> None:
    result = plan(_input(cpu_bytes=64 * GB, concurrent_sessions=4, fs_root_dir="/kv"))
    assert result.kv_transfer_config == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": 64 * GB,
            "block_size": 16,
            "eviction_policy": "lru",
            "secondary_tiers": [
                {"type": "fs", "root_dir": "/kv", "n_read_threads": 16, "n_write_threads": 16}
            ],
        },
    }


def test_fio_block_size_and_o_direct_rounding() -> None:
    assert fio_block_size(5_242_880) == 5_242_880
    assert fio_block_size(1_179_648) == 1_179_648
    mla = plan(
        SizingInput(
            geometry=ModelGeometry(61, 1, 576, latent_attention=True),
            average_context_tokens=1000,
        )
    )
    assert mla.sizing.block_bytes == 1_124_352  # 16 × 61 × 576 × 2, not 4 KiB aligned
    assert mla.fio_block_size == 1_126_400
    assert "O_DIRECT" in mla.decisions["fioBlockSize"]
    assert "--bs=1126400" in mla.fio_command


def test_fio_args_follow_the_study() -> None:
    args = fio_args(5_242_880, "/mnt/kv-cache")
    for flag in (
        "--rw=randrw",
        "--rwmixread=75",
        "--bs=5242880",
        "--iodepth=1",
        "--numjobs=16",
        "--direct=1",
        "--ioengine=libaio",
        "--runtime=60",
    ):
        assert flag in args


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"average_context_tokens": 0}, "averageContextTokens"),
        ({"concurrent_sessions": -1}, "concurrentSessions"),
        ({"cpu_bytes": 0}, "cpu.size"),
        ({"block_tokens": 24}, "blockSizeTokens"),
        ({"tensor_parallel_size": 3}, "tensorParallelSize"),
        ({"kv_cache_dtype": "int8"}, "kvCacheDtype"),
        ({"disk_type": "Tape"}, "disk.type"),
        ({"available_disk_types": frozenset({"Tape"})}, "availableDiskTypes"),
        ({"tier_p99_seconds": {"NVMe": 0}}, "tierP99Seconds"),
        ({"max_node_memory_fraction": 1.5}, "maxNodeMemoryFraction"),
        ({"cpu_bytes": 1000}, "cpu.size"),  # smaller than one block
        ({"node_memory_bytes": 8 * GiB}, "nodeMemoryBytes"),  # nothing left after headroom
        ({"eviction_policy": "fifo"}, "evictionPolicy"),
    ],
)
def test_bad_input_names_its_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(SizingError) as err:
        plan(_input(**changes))
    assert err.value.field == field


def test_pipeline_stages_keep_one_copy_per_rank_for_mla() -> None:
    """vLLM's replicated MLA layout is TP-only: with pipeline stages each rank keeps its own."""
    from kvtier.sizing import lookup_model

    def chunk(pp: int) -> int:
        inp = SizingInput(
            lookup_model("deepseek-v3"),
            32_000,
            tensor_parallel_size=8,
            vllm_version="0.33.0",
            pipeline_parallel_size=pp,
        )
        return plan(inp).sizing.block_bytes

    assert chunk(1) == 1_126_400 and chunk(2) == 8 * 16 * 61 * 576 * 2


def test_the_cpu_tier_bytes_have_one_carrier() -> None:
    """The connector's settings hold no CPU bytes: the config is written from the sizing's
    one figure (and a role's, where a role carries its own)."""
    from kvtier.sizing import ConnectorSettings, record

    assert not [name for name, _ in ConnectorSettings._record_fields if "cpu" in name]
    result = plan(_input(cpu_bytes=64 * GB, concurrent_sessions=4))
    extra = result.kv_transfer_config["kv_connector_extra_config"]
    assert extra["cpu_bytes_to_use"] == result.sizing.cpu_bytes_to_use == 64 * GB
    smaller = record.replace(result.sizing, cpu_bytes_to_use=32 * GB)
    moved = record.replace(result, sizing=smaller)
    assert moved.kv_transfer_config["kv_connector_extra_config"]["cpu_bytes_to_use"] == 32 * GB
    assert moved.connector.kv_transfer_config(32 * GB) == moved.kv_transfer_config
