"""vLLM-format /metrics text for tests, from vLLM's own metric definitions and scripted traffic.

The definitions (names, types, help, labels, buckets, created label values, tier labels) are
tests/fixtures/vllm-metrics/<version>.json, recorded from each vLLM release by
hack/conformance/metrics.py; prometheus_client, which vLLM itself exports with, renders them.
Values come from a Traffic scenario: steady per-second rates, integrated over elapsed time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm-metrics"
VERSIONS = ("0.24.0", "0.33.0")
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
BLOCK_TOKENS = 16
BLOCK_BYTES = 5_242_880  # Llama 3.1 70B, 16-bit KV, 16 tokens, whole server


def definitions(version: str, config: str) -> dict[str, Any]:
    doc = json.loads((FIXTURES / f"{version}.json").read_text())
    return dict(doc["configs"][config])


@dataclass(frozen=True)
class Traffic:
    """Steady traffic: rates per second of the whole server."""

    prompt_tokens: float  # prompt tokens per second
    offload_share: float  # of prompt tokens, loaded from the offload tiers
    local_hit_share: float  # of prompt tokens, hits in the GPU prefix cache
    t_prefill: float  # seconds per token computed locally
    load_seconds_per_block: float  # restore time of one block
    requests: float = 1.0  # requests per second
    stores_dropped: float = 0.0  # dropped offload stores per second
    # Lookups that reach the offload tiers, as a share of prompt tokens.
    queried_share: float = 0.8
    # TP x PP workers: vLLM adds up every worker's transfer time.
    workers: int = 1


SCENARIOS: dict[str, Traffic] = {
    # 60 % of prompt tokens restored at 20 ms per 16-token block (recompute: 16 × 5 ms).
    "hit": Traffic(20_000, 0.6, 0.1, 0.005, 0.02),
    # Offload queried, never hit: a CPU tier smaller than the GPU KV cache.
    "useless": Traffic(20_000, 0.0, 0.1, 0.005, 0.02),
    # Hits, but a block takes 150 ms to restore and 80 ms to recompute.
    "slow": Traffic(20_000, 0.6, 0.1, 0.005, 0.15),
    "idle": Traffic(0, 0.0, 0.0, 0.005, 0.02, requests=0),
}


def totals(t: Traffic, seconds: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
    """Cumulative values after `seconds` of traffic, by (vLLM's declared name, extra labels).
    A histogram's value is (sum, count)."""
    prompt = t.prompt_tokens * seconds
    offload = prompt * t.offload_share
    local_hit = prompt * t.local_hit_share
    computed = prompt - offload - local_hit
    queried = prompt * t.queried_share
    blocks = offload / BLOCK_TOKENS
    requests = t.requests * seconds
    fs_hits = blocks * 0.25  # a quarter of the restored chunks come from the fs tier
    out: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {
        ("vllm:prompt_tokens", ()): prompt,
        ("vllm:prompt_tokens_by_source", (("source", "external_kv_transfer"),)): offload,
        ("vllm:prompt_tokens_by_source", (("source", "local_cache_hit"),)): local_hit,
        ("vllm:prompt_tokens_by_source", (("source", "local_compute"),)): computed,
        ("vllm:prefix_cache_queries", ()): prompt,
        ("vllm:prefix_cache_hits", ()): local_hit,
        ("vllm:external_prefix_cache_queries", ()): queried,
        ("vllm:external_prefix_cache_hits", ()): offload,
        ("vllm:kv_offload_load_bytes", ()): blocks * BLOCK_BYTES,
        ("vllm:kv_offload_load_time", ()): blocks * t.load_seconds_per_block * t.workers,
        ("vllm:kv_offload_store_bytes", ()): computed / BLOCK_TOKENS * BLOCK_BYTES,
        ("vllm:kv_offload_store_time", ()): computed / BLOCK_TOKENS * 0.002 * t.workers,
        ("vllm:kv_offload_allocation_failure", ()): t.stores_dropped * seconds,
        ("vllm:request_prefill_time_seconds", ()): (computed * t.t_prefill, requests),
        ("vllm:time_to_first_token_seconds", ()): (computed * t.t_prefill * 1.05, requests),
        ("vllm:kv_offload_tiering_chunk_queries", (("tier", "0:primary"),)): queried / 16,
        ("vllm:kv_offload_tiering_chunk_hits", (("tier", "0:primary"),)): blocks - fs_hits,
        ("vllm:kv_offload_tiering_chunk_queries", (("tier", "1:fs"),)): queried / 16,
        ("vllm:kv_offload_tiering_chunk_hits", (("tier", "1:fs"),)): fs_hits,
        ("vllm:kv_offload_tiering_read_bytes", (("tier", "1:fs"),)): fs_hits * BLOCK_BYTES,
        ("vllm:kv_offload_tiering_read_time", (("tier", "1:fs"),)): fs_hits * 0.03 * t.workers,
    }
    return out


def _children(defn: dict[str, Any], tier_labels: list[str]) -> list[dict[str, str]]:
    """Every label set vLLM would show for one metric: its created values, tier labels."""
    engine = {"model_name": MODEL, "engine": "0"}
    sets: list[dict[str, str]] = [{}]
    for label in defn["labels"]:
        if label in engine:
            sets = [{**s, label: engine[label]} for s in sets]
            continue
        values = (defn.get("labelValues") or {}).get(label)
        if values is None and label == "tier":
            values = tier_labels
        if not values:
            return []  # filled at run time only (e.g. reasons): no series until then
        sets = [{**s, label: v} for s in sets for v in values]
    return sets


def render(
    version: str, config: str, values: dict[tuple[str, tuple[tuple[str, str], ...]], Any]
) -> bytes:
    """The text exposition of every metric the fixture declares, at these values."""
    defs = definitions(version, config)
    tiers = list(defs.get("tierLabels") or [])
    registry = CollectorRegistry()
    for defn in defs["metrics"]:
        name, kind, labels = defn["name"], defn["type"], defn["labels"]
        metric: Any
        if kind == "counter":
            metric = Counter(name, defn["help"], labels, registry=registry)
        elif kind == "gauge":
            metric = Gauge(name, defn["help"], labels, registry=registry)
        elif kind == "histogram":
            buckets = defn.get("buckets") or Histogram.DEFAULT_BUCKETS
            metric = Histogram(name, defn["help"], labels, registry=registry, buckets=buckets)
        else:
            continue
        for child_labels in _children(defn, tiers):
            extra = tuple(
                sorted((k, v) for k, v in child_labels.items() if k not in ("model_name", "engine"))
            )
            child = metric.labels(**child_labels)
            value = values.get((name, extra))
            if value is None:
                continue
            if kind == "counter" and value > 0:
                child.inc(value)
            elif kind == "gauge":
                child.set(value)
            elif kind == "histogram":
                total, count = value
                for _ in range(int(count)):
                    child.observe(total / count)
    return generate_latest(registry)
