"""Run every scenario of a SimConfig and summarise it: throughput, TTFT, hits per tier."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from kvtier.simulate.config import SimConfig
from kvtier.simulate.engine import Progress, Stats, run_scenario
from kvtier.simulate.setup import Derived, derive

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
            "restorePolicy": c.restore_policy,
            "disk": None
            if disk is None
            else {
                "type": disk.kind,
                "p99Seconds": disk.p99_seconds,
                "bandwidthBytesPerSecond": disk.bandwidth_bytes_per_second,
                "shared": disk.shared,
            },
            "workload": {
                "sessions": w.sessions,
                "averageContextTokens": w.average_context_tokens,
                "systemPromptTokens": w.system_prompt_tokens,
                "outputTokens": w.output_tokens,
                "toolTokens": w.tool_tokens,
                "thinkSeconds": w.think_seconds,
            },
            "durationSeconds": c.duration_seconds,
            "warmupSeconds": c.warmup_seconds,
            "seed": c.seed,
            "derived": self.derived.as_dict(),
            "scenarios": [r.as_dict() for r in self.results],
        }


def simulate(config: SimConfig, progress: Progress | None = None) -> Simulation:
    """All of config.scenarios on the same seeded workload; ratios against the first."""
    derived = derive(config)
    window = config.duration_seconds - config.warmup_seconds
    summaries = [
        _summary(s, run_scenario(config, derived, s, progress), config.duration_seconds, window)
        for s in config.scenarios
    ]
    base = summaries[0]
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


def _summary(scenario: str, stats: Stats, end: float, window: float) -> dict[str, Any]:
    done = [r for r in stats.requests if r.finished <= end]
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
    }


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ratio(value: float, base: float) -> float:
    return round(value / base, 3) if base else 0.0
