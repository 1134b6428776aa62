"""kvtier simulate against llm-d's published gpt-oss-120b tiered-prefix-cache sweep.

One parameter set (kvtier.simulate.llmd_gpt_oss_config, every value from the benchmark's
setup or a datasheet, docs/simulator.md); nothing here is tuned to the published results.
The gain of a stage is the CPU-offload run's output throughput over the baseline's, within
±30 % of the published ratio, for seeds 1, 2 and 3.
"""

from __future__ import annotations

import pytest

from kvtier.simulate import Simulation, llmd_gpt_oss_config, simulate

# guides/tiered-prefix-cache/benchmark-results (llm-d): throughput per stage, offload over
# baseline (1,738 / 1,983 at 5 QPS; 3,799 / 3,664; 6,967 / 6,581; 11,742 / 6,722 at 40).
PUBLISHED_GAIN = {5.0: 0.877, 10.0: 1.037, 20.0: 1.059, 40.0: 1.747}


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda seed: f"seed{seed}")
def sweep(request: pytest.FixtureRequest) -> Simulation:
    return simulate(llmd_gpt_oss_config(seed=request.param))


@pytest.mark.parametrize("rate", sorted(PUBLISHED_GAIN))
def test_the_gain_of_each_stage_is_llm_ds(sweep: Simulation, rate: float) -> None:
    stage = next(s for s in sweep.by_scenario("cpu").stages if s["rate"] == rate)
    published = PUBLISHED_GAIN[rate]
    assert abs(stage["throughputRatio"] - published) <= 0.30 * published, stage


def test_at_40_qps_the_baseline_queues_and_offload_removes_most_of_it(sweep: Simulation) -> None:
    # Published: mean TTFT 24.78 s → 4.24 s (−82.9 %) at 40 QPS.
    base = sweep.by_scenario("none").stages[-1]
    offload = sweep.by_scenario("cpu").stages[-1]
    assert base["rate"] == 40.0
    assert base["ttftMeanSeconds"] > 10
    assert offload["ttftMeanSeconds"] < 0.2 * base["ttftMeanSeconds"]


def test_the_offload_run_hits_the_cpu_tier_and_the_baseline_cannot(sweep: Simulation) -> None:
    cpu = sweep.by_scenario("cpu").counters
    assert sweep.by_scenario("none").counters["external_prefix_cache_queries"] == 0
    assert cpu["external_prefix_cache_hits"] > 0.3 * cpu["external_prefix_cache_queries"]
