"""Run every scenario of a SimConfig and summarise it: throughput, TTFT, hits per tier."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kvtier.simulate.config import SimConfig, Workload
from kvtier.simulate.engine import Progress, Request, Stats, run_scenario
from kvtier.simulate.setup import Derived, derive
from kvtier.simulate.workload import SharedPrefix, Stages, Trace

TIERS = ("gpu", "cpu", "disk", "recompute")


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    requests: int
    output_tokens_per_second: float
    requests_per_second: float
    ttft_mean: float
    ttft_p50: float
    ttft_p99: float
    hit_ratios: dict[str, float]  # prompt tokens served by each tier (recompute: by none)
    counters: dict[str, int]  # as vLLM's prefix_cache_* and external_prefix_cache_* count
    preemptions: int
    stages: tuple[dict[str, float], ...]  # per arrival stage of an open-loop sweep
    throughput_ratio: float  # against the first scenario (tiers off)
    ttft_ratio: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "requests": self.requests,
            "outputTokensPerSecond": self.output_tokens_per_second,
            "requestsPerSecond": self.requests_per_second,
            "ttftMeanSeconds": self.ttft_mean,
            "ttftP50Seconds": self.ttft_p50,
            "ttftP99Seconds": self.ttft_p99,
            "hitRatios": self.hit_ratios,
            "counters": self.counters,
            "preemptions": self.preemptions,
            "stages": list(self.stages),
            "throughputRatio": self.throughput_ratio,
            "ttftRatio": self.ttft_ratio,
        }


@dataclass(frozen=True)
class Simulation:
    config: SimConfig
    derived: Derived
    results: tuple[ScenarioResult, ...]

    def by_scenario(self, name: str) -> ScenarioResult:
        return next(r for r in self.results if r.scenario == name)

    def as_dict(self) -> dict[str, Any]:
        c = self.config
        w = c.workload
        disk = c.disk
        return {
            "model": c.model,
            "tensorParallelSize": c.tensor_parallel_size,
            "gpu": c.gpu.name,
            "replicas": c.replicas,
            "routing": c.routing,
            "routerWeights": list(c.router_weights),
            "lruCapacityPerServer": c.lru_capacity_per_server,
            "routerAutotune": c.router_autotune,
            "cpuPrefixWeight": c.cpu_prefix_weight,
            "noHitLruWeight": c.no_hit_lru_weight,
            "connectorHybridKV": c.connector_hybrid_kv,
            "prefillReferenceTokens": c.prefill_reference_tokens,
            "offloadPromptOnly": c.offload_prompt_only,
            "offloadEveryBlock": c.offload_every_block,
            "restorePolicy": c.restore_policy,
            "disk": None
            if disk is None
            else {
                "type": disk.kind,
                "p99Seconds": disk.p99_seconds,
                "bandwidthBytesPerSecond": disk.bandwidth_bytes_per_second,
                "shared": disk.shared,
            },
            "workload": workload_dict(w),
            "durationSeconds": c.duration_seconds,
            "warmupSeconds": c.warmup_seconds,
            "seed": c.seed,
            "derived": self.derived.as_dict(),
            "scenarios": [r.as_dict() for r in self.results],
        }


def workload_dict(w: Workload | SharedPrefix | Trace) -> dict[str, Any]:
    if isinstance(w, Workload):
        return {
            "shape": "agentic",
            "sessions": w.sessions,
            "averageContextTokens": w.average_context_tokens,
            "systemPromptTokens": w.system_prompt_tokens,
            "outputTokens": w.output_tokens,
            "toolTokens": w.tool_tokens,
            "thinkSeconds": w.think_seconds,
            "concurrency": w.concurrency or w.sessions,
        }
    if isinstance(w, SharedPrefix):
        return {
            "shape": "shared-prefix",
            "groups": w.groups,
            "questions": w.questions,
            "prefixTokens": w.prefix_tokens,
            "questionTokens": w.question_tokens,
            "outputTokens": w.output_tokens,
            "rates": list(w.stages.rates) if w.stages else None,
            "stageSeconds": w.stages.seconds if w.stages else None,
            "stagePauseSeconds": w.stages.pause_seconds if w.stages else None,
            "order": w.order,
            "concurrency": w.concurrency or None,
        }
    return {"shape": "trace", "source": w.source, "requests": len(w.requests)}


def simulate(config: SimConfig, progress: Progress | None = None) -> Simulation:
    """All of config.scenarios on the same seeded workload; ratios against the first."""
    derived = derive(config)
    window = config.duration_seconds - config.warmup_seconds
    stages = config.workload.stages if isinstance(config.workload, SharedPrefix) else None
    summaries = [
        _summary(
            s, run_scenario(config, derived, s, progress), config.duration_seconds, window, stages
        )
        for s in config.scenarios
    ]
    base = summaries[0]
    for s in summaries:
        for stage, first in zip(s["stages"], base["stages"], strict=True):
            stage["throughputRatio"] = _ratio(
                stage["outputTokensPerSecond"], first["outputTokensPerSecond"]
            )
    results = tuple(
        ScenarioResult(
            **s,
            throughput_ratio=_ratio(
                s["output_tokens_per_second"], base["output_tokens_per_second"]
            ),
            ttft_ratio=_ratio(s["ttft_mean"], base["ttft_mean"]),
        )
        for s in summaries
    )
    return Simulation(config, derived, results)


def _summary(
    scenario: str, stats: Stats, end: float, window: float, stages: Stages | None
) -> dict[str, Any]:
    if stats.end is not None:  # a sweep of waiting stages lasts until it is answered
        end, window = stats.end, stats.end - stats.warmup
    done = [r for r in stats.requests if 0 <= r.finished <= end]
    ttfts = sorted(r.first_token - r.arrival for r in done)
    prompt = sum(r.prompt for r in done) or 1
    hits = [sum(r.hits[i] for r in done) for i in range(3)]
    ratios = [h / prompt for h in hits]
    recomputed = 1 - sum(ratios) if done else 0.0  # nothing done: nothing recomputed either
    return {
        "scenario": scenario,
        "requests": len(done),
        "output_tokens_per_second": round(sum(r.output for r in done) / window, 2),
        "requests_per_second": round(len(done) / window, 4),
        "ttft_mean": round(statistics.fmean(ttfts), 3) if ttfts else 0.0,
        "ttft_p50": round(_quantile(ttfts, 0.5), 3),
        "ttft_p99": round(_quantile(ttfts, 0.99), 3),
        "hit_ratios": {
            name: round(value, 4) for name, value in zip(TIERS, [*ratios, recomputed], strict=True)
        },
        "counters": {
            "prefix_cache_queries": sum(r.queries for r in done),
            "prefix_cache_hits": sum(r.gpu_hits for r in done),
            "external_prefix_cache_queries": sum(r.external_queries for r in done),
            "external_prefix_cache_hits": sum(r.external_hits for r in done),
        },
        "preemptions": stats.preemptions,
        "stages": tuple(_stages(done, stages, stats.stage_starts)) if stages else (),
    }


def _stages(done: list[Request], stages: Stages, starts: list[float]) -> Iterator[dict[str, float]]:
    """Per stage, the requests that arrived in it: output tokens/s from the stage's start
    to the last of them finishing, and their mean TTFT (as llm-d-benchmark reports)."""
    by_stage: list[list[Request]] = [[] for _ in stages.rates]
    for r in done:
        by_stage[r.stage if r.stage >= 0 else stages.stage(r.arrival)].append(r)
    for index, (rate, requests) in enumerate(zip(stages.rates, by_stage, strict=True)):
        start = starts[index] if index < len(starts) else index * stages.seconds
        span = max((r.finished for r in requests), default=start) - start
        ttft = statistics.fmean(r.first_token - r.arrival for r in requests) if requests else 0.0
        yield {
            "rate": rate,
            "requests": len(requests),
            "outputTokensPerSecond": round(sum(r.output for r in requests) / span, 1)
            if span > 0
            else 0.0,
            "ttftMeanSeconds": round(ttft, 3),
        }


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ratio(value: float, base: float) -> float:
    return round(value / base, 3) if base else 0.0
