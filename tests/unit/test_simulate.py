"""kvtier simulate reproduces the study's published ratios and findings (docs/simulator.md).

One fixed parameter set (study_config) for every case: nothing here is tuned per case.
"""

from __future__ import annotations

import dataclasses

import pytest

from kvtier.simulate import (
    STUDY_CEPHFS,
    SimConfig,
    Simulation,
    Workload,
    derive,
    simulate,
    study_config,
)
from kvtier.simulate.cache import PrefixLRU
from kvtier.sizing import SizingError, SizingInput, lookup_model, plan


def _within(value: float, published: float, tolerance: float = 0.30) -> bool:
    return abs(value - published) <= tolerance * published


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda seed: f"seed{seed}")
def study(request: pytest.FixtureRequest) -> Simulation:
    # Three seeds: the reproduction does not hang on one lucky workload draw.
    return simulate(study_config(seed=request.param))


def test_cpu_only_throughput_is_the_studys_3_3x(study: Simulation) -> None:
    ratio = study.by_scenario("cpu").throughput_ratio
    assert _within(ratio, 3.3), ratio


def test_cpu_plus_disk_throughput_is_the_studys_5_8x(study: Simulation) -> None:
    ratio = study.by_scenario("cpu+disk").throughput_ratio
    assert _within(ratio, 5.8), ratio


def test_mean_ttft_falls_from_60_to_10_seconds(study: Simulation) -> None:
    before = study.by_scenario("none").ttft_mean
    after = study.by_scenario("cpu+disk").ttft_mean
    assert _within(before, 60.0), before
    assert _within(after, 10.0), after


def test_the_working_set_does_not_fit_the_cpu_tier_in_the_headline_case(
    study: Simulation,
) -> None:
    # What separates the cases in the study; the disk tier serves what the CPU tier lacks.
    assert not study.derived.sizing.sizing.fits_in_cpu
    tiered = study.by_scenario("cpu+disk").hit_ratios
    assert tiered["disk"] > 0.1
    assert tiered["recompute"] < study.by_scenario("cpu").hit_ratios["recompute"] / 2


def test_a_disk_tier_adds_little_when_the_working_set_fits_the_cpu_tier() -> None:
    # kvtier's auto CPU tier on a 2 TiB node: 510 GiB, more than 14 sessions' working set.
    result = simulate(study_config(cpu_bytes=None))
    assert result.derived.sizing.sizing.fits_in_cpu
    cpu, tiered = result.by_scenario("cpu"), result.by_scenario("cpu+disk")
    assert tiered.hit_ratios["disk"] < 0.02
    assert abs(tiered.throughput_ratio - cpu.throughput_ratio) <= 0.05 * cpu.throughput_ratio
    assert cpu.throughput_ratio > 3


def _replicas(count: int) -> Simulation:
    config = study_config(replicas=count, disk=STUDY_CEPHFS)
    workload = dataclasses.replace(Workload(), sessions=14 * count)
    return simulate(dataclasses.replace(config, workload=workload))


def test_several_replicas_cpu_only_falls_back_to_recompute_cephfs_keeps_reuse() -> None:
    one, three = _replicas(1), _replicas(3)
    reuse_one = one.by_scenario("cpu").hit_ratios["cpu"]
    reuse_three = three.by_scenario("cpu").hit_ratios["cpu"]
    assert reuse_one > 0.4
    assert reuse_three < reuse_one / 4  # a session rarely finds its own replica's CPU tier
    assert three.by_scenario("cpu").throughput_ratio < 1.2  # no gain left over recompute
    shared = three.by_scenario("cpu+disk").hit_ratios
    assert shared["recompute"] < 0.15  # the shared CephFS tier still holds every session
    assert shared["disk"] > 0.3


def test_a_load_aware_restore_policy_skips_restores_the_queue_would_make_slow() -> None:
    # Three replicas on a 2 GB/s shared tier: restoring every hit queues the reads while the
    # requests hold their GPU blocks; skipping the restores that would wait longer than a
    # recompute keeps part of the reuse and the throughput.
    config = study_config(
        replicas=3, disk=dataclasses.replace(STUDY_CEPHFS, bandwidth_bytes_per_second=2e9)
    )
    config = dataclasses.replace(config, workload=dataclasses.replace(Workload(), sessions=42))
    always = simulate(config).by_scenario("cpu+disk")
    faster = simulate(dataclasses.replace(config, restore_policy="faster")).by_scenario("cpu+disk")
    assert always.throughput_ratio < 1 < faster.throughput_ratio
    assert 0 < faster.hit_ratios["disk"] < always.hit_ratios["disk"]
    assert faster.ttft_mean < always.ttft_mean


def test_a_seed_reproduces_the_run_exactly_and_another_seed_does_not() -> None:
    short = study_config(duration_seconds=900, warmup_seconds=100)
    first, again = simulate(short).as_dict(), simulate(short).as_dict()
    assert first == again
    other = simulate(dataclasses.replace(short, seed=2)).as_dict()
    assert other["scenarios"] != first["scenarios"]


def test_kv_figures_come_from_the_sizing_engine() -> None:
    config = study_config()
    derived = derive(config)
    sizing = plan(
        SizingInput(
            geometry=lookup_model(config.model),
            average_context_tokens=50_000,
            concurrent_sessions=14,
            tensor_parallel_size=8,
            cpu_bytes=config.cpu_bytes,
        )
    ).sizing
    assert derived.bytes_per_token == sizing.bytes_per_token == 262_144  # facts.md table
    assert derived.sizing.sizing.block_bytes == 4_194_304
    assert derived.cpu_tokens == sizing.cpu_bytes_to_use // sizing.bytes_per_token
    # An fp8 KV cache halves every byte figure, through the same engine.
    fp8 = derive(dataclasses.replace(config, kv_cache_dtype="fp8"))
    assert fp8.bytes_per_token == 131_072
    assert fp8.gpu_kv_tokens == pytest.approx(2 * derived.gpu_kv_tokens, abs=16)


def test_the_auto_cpu_tier_is_kvtiers_own_for_the_node() -> None:
    config = study_config(cpu_bytes=None)
    workload = dataclasses.replace(Workload(), sessions=64)
    derived = derive(dataclasses.replace(config, workload=workload))
    # docs/sizing.md: (0.5 × 2 TiB − 4 GiB) ÷ 2 in whole 4 MiB blocks, as `kvtier plan` says.
    assert derived.sizing.sizing.cpu_bytes_to_use == 547_608_330_240
    assert derived.cpu_tokens == 547_608_330_240 // 262_144


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"replicas": 0}, "replicas"),
        ({"routing": "nearest"}, "routing"),
        ({"restore_policy": "never"}, "restorePolicy"),
        ({"parameters": 2e12}, "parameters"),  # weights larger than the GPUs
        ({"warmup_seconds": 4000.0}, "warmupSeconds"),
        ({"scenarios": ("gpu",)}, "scenarios"),
    ],
)
def test_bad_input_names_the_field(change: dict[str, object], field: str) -> None:
    config: SimConfig = dataclasses.replace(study_config(), **change)  # type: ignore[arg-type]
    with pytest.raises(SizingError) as err:
        derive(config)
    assert err.value.field == field


def test_prefix_lru_evicts_the_tail_of_the_least_recent_prefix() -> None:
    cache = PrefixLRU(capacity_tokens=96, block_tokens=16)
    cache.touch("a", 50)  # whole blocks only: 48
    cache.touch("b", 48)
    assert (cache.cached("a"), cache.cached("b")) == (48, 48)
    cache.touch("c", 32)  # 32 over: two blocks off the tail of "a", the least recent
    assert (cache.cached("a"), cache.cached("b"), cache.cached("c")) == (16, 48, 32)
    assert cache.take("b") == 48 and cache.cached("b") == 0
    assert cache.used == 48
