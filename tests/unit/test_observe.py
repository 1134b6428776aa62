"""kvtier.observe: series, figures and the TierEffective verdict, over vLLM-format metrics
generated from vLLM's own metric definitions (tests/fixtures/vllm-metrics)."""

from __future__ import annotations

import pytest

from kvtier.api.observation import EffectiveState, TPrefill
from kvtier.observe import series as s
from kvtier.observe.figures import figures
from kvtier.observe.series import SeriesKey, Snapshot, increases, parse_exposition
from kvtier.observe.verdict import (
    Thresholds,
    choose_t_prefill,
    judge,
    settle,
)
from tests import vllm_exposition as vx

WINDOW = 120.0


def window(version: str, config: str, scenario: str, start: float = 600.0) -> s.Increases:
    traffic = vx.SCENARIOS[scenario]
    before = vx.render(version, config, vx.totals(traffic, start)).decode()
    after = vx.render(version, config, vx.totals(traffic, start + WINDOW)).decode()
    return increases(
        parse_exposition(before, "pod-a", start), parse_exposition(after, "pod-a", start + WINDOW)
    )


def exposed(version: str, config: str) -> set[str]:
    names = set()
    for m in vx.definitions(version, config)["metrics"]:
        if m["type"] == "counter":
            names.add(m["name"] + "_total")
        elif m["type"] == "histogram":
            names |= {m["name"] + "_sum", m["name"] + "_count"}
        else:
            names.add(m["name"])
    return names


@pytest.mark.parametrize("version", vx.VERSIONS)
def test_every_name_kvtier_reads_is_one_vllm_exports(version: str) -> None:
    names = exposed(version, "cpu") | exposed(version, "cpu+fs")
    tiering = {n for n in s.READ if "_tiering_" in n}
    missing = set(s.READ) - names - tiering
    # allocation failures are counted from 0.33 on; 0.24 has no such counter
    if version == "0.24.0":
        missing.discard(s.ALLOCATION_FAILURES)
    assert not missing, f"vLLM {version} exports none of {sorted(missing)}"


def test_the_tiering_series_and_labels_are_vllm_033s() -> None:
    defs = vx.definitions("0.33.0", "cpu+fs")
    assert defs["tierLabels"] == ["0:primary", "1:fs"]
    tiering = {n for n in s.READ if "_tiering_" in n}
    assert tiering <= exposed("0.33.0", "cpu+fs")
    by_name = {m["name"]: m for m in defs["metrics"]}
    assert "tier" in by_name["vllm:kv_offload_tiering_chunk_hits"]["labels"]
    sources = by_name["vllm:prompt_tokens_by_source"]["labelValues"]["source"]
    assert {s.SOURCE_EXTERNAL, s.SOURCE_LOCAL_COMPUTE, s.SOURCE_LOCAL_HIT} <= set(sources)


def test_increases_survive_a_counter_reset_and_a_new_pod() -> None:
    a = SeriesKey(s.LOAD_BYTES, "pod-a")
    b = SeriesKey(s.LOAD_BYTES, "pod-b")
    before = Snapshot(0, {a: 1000.0})
    after = Snapshot(60, {a: 300.0, b: 50.0})  # pod-a restarted, pod-b is new
    inc = increases(before, after)
    assert inc.seconds == 60
    assert inc.get(s.LOAD_BYTES) == 350.0
    assert inc.get(s.LOAD_TIME) is None


def test_engines_of_one_pod_are_added_up() -> None:
    text = (
        "# TYPE vllm:kv_offload_load_bytes counter\n"
        'vllm:kv_offload_load_bytes_total{engine="0"} 10\n'
        'vllm:kv_offload_load_bytes_total{engine="1"} 5\n'
    )
    snap = parse_exposition(text, "p", 0)
    assert snap.values == {SeriesKey(s.LOAD_BYTES, "p"): 15.0}


@pytest.mark.parametrize("version", vx.VERSIONS)
def test_figures_of_the_hit_scenario(version: str) -> None:
    fig = figures(window(version, "cpu+fs", "hit"), vx.BLOCK_BYTES)
    t = vx.SCENARIOS["hit"]
    assert fig.window_seconds == WINDOW
    assert fig.prompt_tokens == pytest.approx(t.prompt_tokens * WINDOW)
    assert fig.tokens_from_offload == pytest.approx(t.prompt_tokens * WINDOW * 0.6)
    assert fig.external_hit_ratio == pytest.approx(0.6 / 0.8)
    assert fig.load_seconds_per_block == pytest.approx(t.load_seconds_per_block)
    assert fig.restore_bytes_per_second == pytest.approx(vx.BLOCK_BYTES / t.load_seconds_per_block)
    assert fig.t_prefill_seconds_per_token == pytest.approx(t.t_prefill)
    tiers = {r.tier: r for r in fig.tiers}
    if version == "0.24.0":
        assert tiers == {}  # no per-tier series before the tiering metrics
    else:
        assert set(tiers) == {"0:primary", "1:fs"}
        assert tiers["1:fs"].read_bytes_per_second == pytest.approx(vx.BLOCK_BYTES / 0.03)


def test_load_time_is_divided_over_the_workers_vllm_sums_it_over() -> None:
    inc = window("0.33.0", "cpu", "hit")
    one = figures(inc, vx.BLOCK_BYTES, workers=1).load_seconds_per_block
    eight = figures(inc, vx.BLOCK_BYTES, workers=8).load_seconds_per_block
    assert one is not None and eight is not None
    assert eight == pytest.approx(one / 8)


def test_figures_without_traffic_are_none_not_zero() -> None:
    fig = figures(window("0.33.0", "cpu+fs", "idle"), vx.BLOCK_BYTES)
    assert fig.prompt_tokens == 0
    assert fig.external_hit_ratio is None
    assert fig.load_seconds_per_block is None
    assert fig.t_prefill_seconds_per_token is None


EXPECTED = {
    "hit": ("True", "ServesHits"),
    "useless": ("False", "NoHits"),
    "slow": ("False", "RestoreSlowerThanRecompute"),
    "idle": ("Unknown", "LowTraffic"),
}


@pytest.mark.parametrize("version", vx.VERSIONS)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_the_verdict_of_each_scenario(version: str, scenario: str) -> None:
    fig = figures(window(version, "cpu+fs", scenario), vx.BLOCK_BYTES)
    tp = choose_t_prefill(None, 50_000, fig.t_prefill_seconds_per_token)
    verdict = judge(fig, tp, vx.BLOCK_TOKENS, Thresholds())
    assert (verdict.status, verdict.reason) == EXPECTED[scenario], verdict.message


def test_a_false_verdict_carries_the_numbers() -> None:
    fig = figures(window("0.33.0", "cpu+fs", "slow"), vx.BLOCK_BYTES)
    verdict = judge(fig, TPrefill(0.005, "Measured"), 16, Thresholds())
    assert "restore 0.15 s per 16-token block vs recompute 0.08 s" in verdict.message
    assert "measured" in verdict.message
    useless = judge(
        figures(window("0.33.0", "cpu", "useless"), vx.BLOCK_BYTES), None, 16, Thresholds()
    )
    assert "external hit ratio 0 (0 of 1920000 tokens queried)" in useless.message


def test_dropped_stores_make_the_tier_ineffective() -> None:
    vx.SCENARIOS["dropping"] = vx.Traffic(20_000, 0.6, 0.1, 0.005, 0.02, stores_dropped=2)
    try:
        fig = figures(window("0.33.0", "cpu", "dropping"), vx.BLOCK_BYTES)
    finally:
        del vx.SCENARIOS["dropping"]
    verdict = judge(fig, TPrefill(0.005, "Measured"), 16, Thresholds())
    assert (verdict.status, verdict.reason) == ("False", "StoresDropped")
    assert "240 offload stores dropped in 120 s" in verdict.message


def test_a_typed_baseline_wins_over_the_measured_t_prefill() -> None:
    assert choose_t_prefill(60.0, 50_000, 0.002) == TPrefill(60.0 / 50_000, "Baseline")
    assert choose_t_prefill(None, 50_000, 0.002) == TPrefill(0.002, "Measured")
    assert choose_t_prefill(None, 50_000, None) is None
    assert TPrefill(0.001, "Measured").ttft_at(50_000) == pytest.approx(50.0)


def test_the_status_flips_only_after_two_evaluations_agree() -> None:
    th = Thresholds()
    hit = judge(figures(window("0.33.0", "cpu", "hit"), vx.BLOCK_BYTES), None, 16, th)
    slow_fig = figures(window("0.33.0", "cpu", "slow"), vx.BLOCK_BYTES)
    slow = judge(slow_fig, TPrefill(0.005, "Measured"), 16, th)
    state = settle(hit, None, th)
    assert state.status == "True"
    state = settle(slow, state, th)
    assert (state.status, state.pending_status, state.pending_count) == ("True", "False", 1)
    state = settle(hit, state, th)  # back: the pending count starts over
    assert (state.status, state.pending_status) == ("True", None)
    state = settle(slow, settle(slow, state, th), th)
    assert (state.status, state.reason) == ("False", "RestoreSlowerThanRecompute")


def test_a_verdict_is_undone_only_past_the_margin() -> None:
    fig = figures(window("0.33.0", "cpu", "hit"), vx.BLOCK_BYTES)  # 20 ms per block
    th = Thresholds(margin=0.1)
    # recompute of a block: 16 × 1.3 ms = 20.8 ms, within 10 % of the 20 ms restore
    tp = TPrefill(0.0013, "Measured")
    assert judge(fig, tp, 16, th).status == "True"
    was_slow = EffectiveState("False", "RestoreSlowerThanRecompute", "")
    assert judge(fig, tp, 16, th, was_slow).status == "False"
    assert judge(fig, TPrefill(0.0015, "Measured"), 16, th, was_slow).status == "True"
