"""kvtier simulate beyond agentic sessions: open-loop stages, shared prefixes, trace replay,
routing policies, the MoE compute model, preemption and vLLM's hit counters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import simpy

from kvtier.simulate import SimConfig, Simulation, derive, llmd_gpt_oss_config, simulate
from kvtier.simulate.cache import PrefixLRU, block_chain_hit, store_chain
from kvtier.simulate.engine import Replica, Request, Stats, run_scenario
from kvtier.simulate.router import Router
from kvtier.simulate.workload import Segment, SharedPrefix, Stages, Trace, read_trace
from kvtier.sizing import SizingError

GiB = 1 << 30


def _small(workload: SharedPrefix | Trace, **changes: object) -> SimConfig:
    """Llama 3.1 8B on one H100 per replica: quick to simulate."""
    base = SimConfig(
        model="llama-3.1-8b",
        parameters=8.03e9,
        tensor_parallel_size=1,
        replicas=4,
        cpu_bytes=64 * GiB,
        disk=None,
        workload=workload,
        duration_seconds=400.0,
        warmup_seconds=0.0,
        scenarios=("none", "cpu"),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _groups(
    rates: tuple[float, ...] = (4.0,), seconds: float = 100.0, groups: int = 40
) -> SharedPrefix:
    return SharedPrefix(
        groups=groups, questions=5, prefix_tokens=6_000, question_tokens=200, output_tokens=100,
        stages=Stages(rates, seconds),
    )  # fmt: skip


def test_open_loop_arrivals_follow_each_stages_rate() -> None:
    config = _small(_groups((2.0, 8.0), 100.0), scenarios=("none",))
    stages = simulate(config).results[0].stages
    assert [s["rate"] for s in stages] == [2.0, 8.0]
    for stage in stages:
        expected = stage["rate"] * 100
        assert abs(stage["requests"] - expected) < 4 * expected**0.5  # Poisson counts


def test_open_loop_queues_grow_past_any_concurrency_when_overloaded() -> None:
    # One replica, offered far more than it serves: the queue (and TTFT) grows stage by
    # stage, which a closed loop of clients can never show.
    config = _small(_groups((1.0, 40.0), 60.0), replicas=1, scenarios=("none",))
    result = simulate(dataclasses.replace(config, duration_seconds=600.0))
    calm, overload = result.results[0].stages
    assert overload["ttftMeanSeconds"] > 20 * max(calm["ttftMeanSeconds"], 0.05)
    groups = _groups()
    closed = dataclasses.replace(
        config, workload=dataclasses.replace(groups, stages=None, concurrency=8)
    )
    assert simulate(closed).results[0].ttft_mean < overload["ttftMeanSeconds"] / 4


def _hit(result: Simulation, scenario: str = "none") -> float:
    return result.by_scenario(scenario).hit_ratios["gpu"]


def test_prefix_aware_routing_keeps_groups_together_and_random_scatters_them() -> None:
    # 200 prefixes of 6,000 tokens: three times one replica's GPU cache, within four.
    config = _small(_groups((6.0,), 200.0, groups=200))
    prefix = simulate(dataclasses.replace(config, routing="prefix"))
    scattered = simulate(dataclasses.replace(config, routing="random"))
    sticky = simulate(dataclasses.replace(config, routing="sticky"))
    assert _hit(prefix) > _hit(scattered) + 0.2
    assert _hit(sticky) > _hit(scattered) + 0.2


def test_a_router_index_smaller_than_hbm_forgets_prefixes_the_gpus_still_hold() -> None:
    config = _small(_groups((6.0,), 200.0, groups=200), routing="prefix")
    full = simulate(config)
    forgetful = simulate(dataclasses.replace(config, lru_capacity_per_server=200))  # 3,200 tokens
    assert _hit(forgetful) < _hit(full) - 0.1


def test_a_restore_under_way_counts_as_waiting_and_the_router_weighs_it() -> None:
    # vLLM keeps a request whose KV is being loaded from a tier among its waiting ones
    # (WAITING_FOR_REMOTE_KVS), so num_requests_waiting, which llm-d's queue-scorer reads,
    # counts it: the router leaves that replica for an equally good idle one.
    import simpy

    from kvtier.simulate.cache import store_chain
    from kvtier.simulate.engine import Replica, Request, Stats
    from kvtier.simulate.router import Router

    config = _small(_groups(), replicas=2, routing="prefix", router_weights=(2.0, 0.0, 1.0))
    derived = derive(config)
    env = simpy.Environment()
    stats = Stats(warmup=0.0)
    replicas = [Replica(env, config, derived, True, None, stats) for _ in range(2)]
    router = Router(config, replicas, derived.block_tokens, cpu=True)
    prompt = ((("group", 0), 6_000),)
    busy = replicas[0]
    assert busy.cpu is not None
    busy.cpu.touch(("group", 0), 6_000)  # the prompt is in its CPU tier
    busy.submit(Request(prompt, output=10, arrival=0.0, affinity=0))
    assert not busy.waiting and busy.loading == 1
    assert busy.num_requests_waiting == 1 and replicas[1].num_requests_waiting == 0
    picked: list[int] = []
    for i, replica in enumerate(replicas):
        replica.submit = lambda r, i=i: picked.append(i)  # type: ignore[method-assign,misc]
    other = ((("other", 1), 6_000),)
    store_chain(router.index.lrus[0], other, 6_000)  # and the router believes it holds the next one
    router.route(Request(other, output=10, arrival=0.0, affinity=1))
    assert picked == [1]  # queue 0 + prefix 1 there, against queue 2 + prefix 0 here
    env.run(until=1.0)
    assert busy.loading == 0 and busy.num_requests_waiting == 0


def test_round_robin_spreads_requests_evenly() -> None:
    config = _small(_groups((4.0,), 100.0), routing="round-robin", scenarios=("none",))
    derived = derive(config)
    seen: list[int] = []
    from kvtier.simulate import engine

    original = engine.Replica.submit

    def record(self: engine.Replica, request: engine.Request) -> None:
        seen.append(id(self))
        original(self, request)

    engine.Replica.submit = record  # type: ignore[method-assign]
    try:
        run_scenario(config, derived, "none")
    finally:
        engine.Replica.submit = original  # type: ignore[method-assign]
    counts = sorted(seen.count(r) for r in set(seen))
    assert len(counts) == 4 and counts[-1] - counts[0] <= 1


def test_counters_are_vllms_queries_and_hits() -> None:
    result = simulate(_small(_groups((4.0,), 100.0, groups=200), routing="random"))
    none, cpu = result.by_scenario("none"), result.by_scenario("cpu")
    c = none.counters
    per_request = 6_000 + 200
    assert c["prefix_cache_queries"] == none.requests * per_request  # no preemption here
    assert 0 < c["prefix_cache_hits"] < c["prefix_cache_queries"]
    assert c["external_prefix_cache_queries"] == 0  # no connector, no external lookups
    e = cpu.counters
    assert e["external_prefix_cache_queries"] == e["prefix_cache_queries"] - e["prefix_cache_hits"]
    assert 0 < e["external_prefix_cache_hits"] <= e["external_prefix_cache_queries"]


def test_preemption_recomputes_and_every_request_still_completes() -> None:
    # A GPU cache of a few requests and long outputs: decoding outgrows it and vLLM preempts.
    workload = SharedPrefix(
        groups=200, questions=1, prefix_tokens=3_000, question_tokens=100, output_tokens=3_000,
        concurrency=24,
    )  # fmt: skip
    config = _small(
        workload,
        replicas=1,
        gpu_memory_utilization=0.33,
        scenarios=("none",),
        duration_seconds=900.0,
        max_num_seqs=64,
    )
    result = simulate(config).results[0]
    assert result.preemptions > 0
    assert result.requests > 24
    # A preempted request is queried again: more queries than prompt tokens.
    assert result.counters["prefix_cache_queries"] > result.requests * 3_100


def test_moe_prefill_counts_active_parameters_and_decode_reads_only_routed_experts() -> None:
    dense = SimConfig(
        model="gpt-oss-120b",
        parameters=116.83e9,
        weights_bytes=round(64.38 * GiB),
        tensor_parallel_size=1,
        disk=None,
        workload=_groups(),
        scenarios=("none", "cpu"),
    )
    moe = dataclasses.replace(dense, active_parameters=5.13e9, experts=128, experts_per_token=4)
    d_dense, d_moe = derive(dense), derive(moe)
    assert 1 / d_dense.prefill_seconds_per_token < 2_500  # all 117 B parameters: ~2.1K tok/s
    assert 40_000 < 1 / d_moe.prefill_seconds_per_token < 50_000  # 5.1 B active: ~48K tok/s
    one, batch = d_moe.weight_read_seconds(1), d_moe.weight_read_seconds(512)
    assert one < batch / 10  # one token reads 4 of 128 experts; 512 tokens read nearly all
    assert batch == pytest.approx(d_dense.weight_read_seconds(512), rel=0.01)


def test_gpu_capacity_follows_gpu_memory_utilization_and_sliding_windows() -> None:
    config = SimConfig(
        model="gpt-oss-120b",
        parameters=116.83e9,
        weights_bytes=round(64.38 * GiB),
        tensor_parallel_size=1,
        disk=None,
        workload=_groups(),
        scenarios=("none", "cpu"),
    )
    low = derive(dataclasses.replace(config, gpu_memory_utilization=0.9))
    high = derive(dataclasses.replace(config, gpu_memory_utilization=0.95))
    assert high.gpu_kv_tokens > low.gpu_kv_tokens
    # Half of gpt-oss's layers keep a 128-token window: about half of 73,728 B a token.
    assert 36_864 < high.bytes_per_token < 38_000
    assert high.sizing.sizing.bytes_per_token == 73_728


def _write_trace(path: Path) -> None:
    lines = []
    for i in range(300):
        lines.append(
            {
                "arrival": 600 - 2 * i,  # written newest first: replay sorts them
                "prefix_id": f"doc-{i % 6}",
                "prefix_tokens": 5_000,
                "input_tokens": 5_300,
                "output_tokens": 50,
            }
        )
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def test_a_trace_replays_with_its_shared_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    _write_trace(path)
    trace = read_trace(path)
    assert len(trace.requests) == 300
    assert [r.arrival for r in trace.requests[:2]] == [0.0, 2.0]
    assert trace.requests[0].segments[0] == (("prefix", "doc-5"), 5_000)
    config = _small(trace, duration_seconds=900.0, routing="sticky")
    result = simulate(config).by_scenario("none")
    assert result.requests == 300
    # Six documents, each held by its replica: nearly every prefix is a GPU hit.
    assert result.hit_ratios["gpu"] > 0.85


def test_a_mooncake_style_trace_with_block_hashes(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1_200, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 1_100, "output_length": 10, "hash_ids": [1, 2, 4]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    trace = read_trace(path, hash_block_tokens=512)
    first, second = trace.requests
    assert second.arrival == 0.5
    assert first.segments[:2] == second.segments[:2]  # blocks 1 and 2 are shared
    assert first.segments[2] != second.segments[2]
    assert sum(n for _, n in first.segments) == 1_200


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"arrival": 1, "input_tokens": 10}', ":1: needs output_tokens or output_length"),
        ('{"arrival": -1, "input_tokens": 10, "output_tokens": 1}', "arrival must be zero or"),
        ("not json", ":1: not JSON"),
        ('{"arrival": 0, "input_tokens": 1.5, "output_tokens": 1}', "input_tokens must be a whole"),
    ],
)
def test_a_bad_trace_line_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(SizingError) as err:
        read_trace(path)
    assert err.value.field == "trace" and message in err.value.message


@pytest.mark.parametrize("lines", [((0.5, 0.01), (0.2, 0.03)), ((0.2, 0.0), (0.5, 0.0))])
def test_a_decode_run_as_one_event_keeps_the_step_times(
    lines: tuple[tuple[float, float], tuple[float, float]],
) -> None:
    # Decode-only steps run as one event; their ends are those of steps run one by one,
    # including where the growing HBM reads overtake the compute.
    from kvtier.simulate.engine import DecodeRun

    (a, b), (c, e) = lines
    run = DecodeRun(10.0, 40, (a, b), (c, e))
    t = 10.0
    for i in range(40):
        t += max(a + b * i, c + e * i)
        assert run.end(i + 1) == pytest.approx(t)
        assert run.done_by(t + 1e-9) == i + 1
        assert run.done_by(t - 1e-9) == i


def test_decode_runs_leave_the_studys_figures_as_step_by_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvtier.simulate import engine, study_config

    config = study_config(duration_seconds=900.0, warmup_seconds=100.0)
    batched = simulate(config).as_dict()["scenarios"]
    monkeypatch.setattr(engine, "MAX_DECODE_RUN", 1)  # every step its own event
    stepped = simulate(config).as_dict()["scenarios"]
    # One figure is taken once for a whole run: the GPU hits of a refused request's repeated
    # look-ups (vLLM counts one per step) are those at the run's end.
    hits = [(s["counters"].pop("prefix_cache_hits"), t["counters"].pop("prefix_cache_hits"))
            for s, t in zip(stepped, batched, strict=True)]  # fmt: skip
    assert stepped == batched
    for one_by_one, as_runs in hits:
        assert as_runs == pytest.approx(one_by_one, rel=1e-4)


def test_agentic_concurrency_is_set_apart_from_the_sessions() -> None:
    # 28 sessions (distinct prefixes) served by 7 clients: never more than 7 in flight, and
    # every session gets its turns.
    from kvtier.simulate import Workload, study_config

    config = study_config(
        workload=Workload(sessions=28, concurrency=7),
        duration_seconds=1200.0,
        warmup_seconds=0.0,
        scenarios=("none",),
    )
    stats = run_scenario(config, derive(config), "none")
    events = sorted(
        [(r.arrival, 1) for r in stats.requests] + [(r.finished, -1) for r in stats.requests]
    )
    in_flight = peak = 0
    for _, change in events:
        in_flight += change
        peak = max(peak, in_flight)
    assert peak == 7
    assert {r.affinity[1] for r in stats.requests} == set(range(28))
    with pytest.raises(SizingError) as err:
        derive(dataclasses.replace(config, workload=Workload(sessions=4, concurrency=5)))
    assert err.value.field == "concurrency"


def test_a_connector_that_turns_the_hybrid_kv_cache_off_costs_sliding_layers_full_kv() -> None:
    from kvtier.simulate import llmd_gpt_oss_config, study_config

    hybrid = derive(llmd_gpt_oss_config(offload_every_block=False))
    naive = hybrid.without_hybrid()
    assert hybrid.window_tokens == 128 and naive.window_tokens == 0
    assert naive.bytes_per_token == 73_728  # 36 layers × 8 KV heads × 64 × 2 × 2 bytes
    assert naive.gpu_kv_tokens < 0.55 * hybrid.gpu_kv_tokens
    assert naive.cpu_tokens < 0.55 * hybrid.cpu_tokens
    assert naive.gpu_blocks < 0.55 * hybrid.gpu_blocks
    dense = derive(study_config())  # no sliding-window layers: nothing changes
    assert dense.without_hybrid() is dense


def test_waiting_stages_send_rate_times_seconds_and_start_on_idle_servers() -> None:
    stages = Stages((2.0, 8.0), 30.0, pause_seconds=20.0)
    config = _small(
        dataclasses.replace(_groups(), stages=stages, order="list"),
        replicas=1,
        scenarios=("none",),
        duration_seconds=3600.0,
    )
    result = simulate(config).results[0]
    assert [s["requests"] for s in result.stages] == [60, 240]
    assert result.requests == 300  # the run ends once the last stage is answered


def _llmd_replicas(n: int, **changes: object) -> tuple[simpy.Environment, list[Replica], Router]:
    """n of llm-d's gpt-oss-120b servers with their CPU tiers, and the guide's router."""
    config = llmd_gpt_oss_config(replicas=n, **changes)
    derived = derive(config)
    env = simpy.Environment()
    replicas = [Replica(env, config, derived, True, None, Stats(warmup=0.0)) for _ in range(n)]
    router = Router(config, replicas, derived.block_tokens, cpu=True, gpu_blocks=derived.gpu_blocks)
    return env, replicas, router


def _prompt(group: int, question: int) -> tuple[Segment, ...]:
    return ((("group", group), 16_491), (("question", group, question), 264))


def _request(segments: tuple[Segment, ...]) -> Request:
    return Request(segments, output=4, arrival=0.0, affinity=0)


def _picks(router: Router, prompts: list[tuple[Segment, ...]]) -> list[int]:
    """The replicas the router sends `prompts` to, one after another (not submitted)."""
    picked: list[int] = []
    for i, replica in enumerate(router.replicas):
        replica.submit = lambda r, i=i: picked.append(i)  # type: ignore[method-assign,misc]
    for segments in prompts:
        router.route(_request(segments))
    return picked


def test_the_no_hit_lru_scorer_spreads_cold_requests_least_recently_used_first() -> None:
    # Only the no-hit-LRU scorer weighs: a request no replica's GPU index matches goes to a
    # replica never given one (in order), then to the one given one least recently; a request
    # some replica matches scores 0.5 everywhere and leaves that order as it was.
    _, _, router = _llmd_replicas(3, router_weights=(0.0, 0.0, 0.0), cpu_prefix_weight=0.0)
    assert _picks(router, [_prompt(g, 0) for g in range(4)]) == [0, 1, 2, 0]
    assert router.cold_order == [1, 2, 0]
    assert router._no_hit_scores(cold=True) == [0.0, 1.0, 0.5]  # by rank: 1, 2, 0
    assert router._no_hit_scores(cold=False) == [0.5, 0.5, 0.5]
    _picks(router, [_prompt(1, 3)])  # group 1's prefix is in replica 1's index: not cold
    assert router.cold_order == [1, 2, 0]
    assert _picks(router, [_prompt(9, 0)]) == [1]


def test_the_autotuned_gpu_index_matches_whole_prompts_in_the_servers_blocks() -> None:
    # llm-d's GPU prefix producer takes vLLM's block size (128) and GPU block count: 256
    # blocks reach past a 16,755-token prompt, so a replica that saw the very prompt scores
    # above one that saw its group with another question (130 blocks against 128); with
    # 16-token blocks, 4,096 tokens are matched and both look the same.
    _, replicas, router = _llmd_replicas(2, router_weights=(0.0, 0.0, 1.0), cpu_prefix_weight=0.0)
    index = router.index
    assert index.block == 128 and replicas[0].d.gpu_blocks == 1_733
    assert index.lrus[0].capacity == 1_733 * 128
    store_chain(index.lrus[0], _prompt(0, 1), 16_755)
    store_chain(index.lrus[1], _prompt(0, 0), 16_755)
    # Replica 0 matches up to the prefix's last block boundary, replica 1 the whole prompt.
    assert index.hits(_prompt(0, 0), 16_755) == [16_384, 16_755]
    assert _picks(router, [_prompt(0, 0)]) == [1]
    _, _, fixed = _llmd_replicas(2, router_autotune=False)
    assert fixed.index.block == 16 and fixed.index.limit == 4_096


def test_vllm_0_22s_connector_stores_every_block_as_it_is_computed() -> None:
    # Every block a prefill computes is stored at that step, sliding-window ones too: the
    # tier holds half a prompt before its prefill ends and returns a group's prefix from
    # another question's prompt; a prompt-end connector returns only whole prompts it stored.
    for every_block, half, prefix in ((True, 8_192, 16_384), (False, 0, 0)):
        env, replicas, _ = _llmd_replicas(1, offload_every_block=every_block)
        replica = replicas[0]
        assert replica.cpu is not None
        replica.submit(_request(_prompt(0, 0)))
        env.run(until=0.3)  # one engine step: 8,192 prompt tokens
        assert replica.cpu.cached(("group", 0)) == half
        env.run(until=5.0)
        assert replica._tier_hit(replica.cpu, _prompt(0, 1)) == prefix
        assert replica._tier_hit(replica.cpu, _prompt(0, 0)) == 16_755


def test_vllm_0_22s_cpu_tier_holds_a_window_block_beside_each_full_attention_one() -> None:
    # 100 GiB ÷ 4,718,592-byte blocks (18 layers × 128 tokens) = 22,755 blocks, two a chunk.
    assert derive(llmd_gpt_oss_config()).cpu_tokens == 22_755 // 2 * 128
    prompt_end = derive(llmd_gpt_oss_config(offload_every_block=False))
    assert prompt_end.cpu_tokens > 1.9 * 22_755 // 2 * 128


def test_a_block_chain_hit_stops_at_the_prompts_own_block_boundaries() -> None:
    cache = PrefixLRU(1 << 20, 128)
    segments = ((("group", 0), 300), (("question", 0), 200))
    assert block_chain_hit(cache, segments) == 0
    store_chain(cache, segments[:1], 300)  # its whole blocks: 256 tokens
    assert block_chain_hit(cache, segments) == 256
    store_chain(cache, segments, 500)
    assert block_chain_hit(cache, segments) == 500  # the prompt's end
    cache.shrink(256)  # the group's tail block goes first (least recently used)
    assert block_chain_hit(cache, segments) == 128
