"""kvtier simulate against llm-d's published gpt-oss-120b tiered-prefix-cache sweep.

One parameter set (kvtier.simulate.llmd_gpt_oss_config, every value from the benchmark's
files, its harness, vLLM, llm-d's calibration or a datasheet, docs/simulator.md); nothing
here is tuned to the published results. For seeds 1, 2 and 3:
- the gain of a stage (the CPU-offload run's output throughput over the baseline's) is
  within ±30 % of the published one at 5, 10, 20 and 40 requests/s;
- the mean TTFT of the saturated stages (published baseline TTFT above 5 s: 25 to 40
  requests/s) is within ±30 % of the published one, baseline and offload. The cases the
  model does not reach are marked xfail with the reason (docs/simulator.md explains them);
  strict, so a change that reaches them has to say so.
"""

from __future__ import annotations

import pytest

from kvtier.simulate import Simulation, llmd_gpt_oss_config, simulate

SEEDS = (1, 2, 3)
# guides/tiered-prefix-cache/benchmark-results-gpt-oss-120b.md (llm-d commit 7489b5cc):
# throughput per stage, offload over
# baseline (1,738 / 1,983 at 5 QPS; 3,799 / 3,664; 6,967 / 6,581; 11,742 / 6,722 at 40).
PUBLISHED_GAIN = {5.0: 0.877, 10.0: 1.037, 20.0: 1.059, 40.0: 1.747}
# Mean TTFT in seconds, (baseline, offload), at the stages where the baseline queues.
PUBLISHED_TTFT = {
    25.0: (6.16, 0.34),
    30.0: (14.07, 0.33),
    35.0: (18.44, 0.50),
    40.0: (24.78, 4.24),
}
_OFFLOAD_MISS = (
    "the simulated CPU tier answers ~96 % of what it is asked (llm-d: 45.1 %), so the "
    "offload servers never queue and their TTFT stays under 0.1 s"
)
_BASELINE_MISS = (
    "the simulated baseline serves ~30 requests/s against llm-d's ~21-22, so it only "
    "starts to queue at 30-35 requests/s"
)
MISSES = {
    (25.0, "none"): _BASELINE_MISS,
    (30.0, "none"): _BASELINE_MISS,
    **{(rate, "cpu"): _OFFLOAD_MISS for rate in PUBLISHED_TTFT},
}


@pytest.fixture(scope="module")
def sweeps() -> dict[int, Simulation]:
    return {seed: simulate(llmd_gpt_oss_config(seed=seed)) for seed in SEEDS}


def _stage(result: Simulation, scenario: str, rate: float) -> dict[str, float]:
    return next(s for s in result.by_scenario(scenario).stages if s["rate"] == rate)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rate", sorted(PUBLISHED_GAIN))
def test_the_gain_of_each_stage_is_llm_ds(
    sweeps: dict[int, Simulation], rate: float, seed: int
) -> None:
    stage = _stage(sweeps[seed], "cpu", rate)
    published = PUBLISHED_GAIN[rate]
    assert abs(stage["throughputRatio"] - published) <= 0.30 * published, stage


def _ttft_cases() -> list[object]:
    cases: list[object] = []
    for rate in sorted(PUBLISHED_TTFT):
        for index, scenario in enumerate(("none", "cpu")):
            miss = MISSES.get((rate, scenario))
            marks = [pytest.mark.xfail(reason=miss, strict=True)] if miss else []
            cases.append(pytest.param(rate, scenario, PUBLISHED_TTFT[rate][index], marks=marks))
    return cases


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("rate", "scenario", "published"), _ttft_cases())
def test_the_mean_ttft_of_each_saturated_stage_is_llm_ds(
    sweeps: dict[int, Simulation], rate: float, scenario: str, published: float, seed: int
) -> None:
    stage = _stage(sweeps[seed], scenario, rate)
    assert abs(stage["ttftMeanSeconds"] - published) <= 0.30 * published, stage


@pytest.mark.parametrize("seed", SEEDS)
def test_the_baselines_gpu_hits_are_few_when_counted_as_vllm_counts_them(
    sweeps: dict[int, Simulation], seed: int
) -> None:
    # Published (fleet): 27.0M hits of 2,564.7M queries (1.1 %); the queries are ~15 times
    # the prompt tokens because a request refused for want of KV blocks is looked up again
    # at every engine step. The sliding-window layers make most of the rest miss.
    base = sweeps[seed].by_scenario("none")
    c = base.counters
    prompts = base.requests * (16_491 + 264)
    assert c["prefix_cache_hits"] < 0.05 * c["prefix_cache_queries"]
    assert c["prefix_cache_queries"] > 5 * prompts
    assert c["external_prefix_cache_queries"] == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_the_offload_run_hits_the_cpu_tier(sweeps: dict[int, Simulation], seed: int) -> None:
    cpu = sweeps[seed].by_scenario("cpu").counters
    assert cpu["external_prefix_cache_hits"] > 0.3 * cpu["external_prefix_cache_queries"]
