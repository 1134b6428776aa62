"""vLLM's metric names, and counter snapshots reduced to increases over a window.

Both sources yield the same shape: a Snapshot of cumulative counter values per series, read
at one instant. Two snapshots a window apart give the window's increases, so the Prometheus
path (two instant queries) and the direct-scrape path (the previous scrape kept in memory)
share everything after the read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Counters as exposed (prometheus_client appends _total). Names are vLLM's own: the fixtures
# under tests/fixtures/vllm-metrics, recorded from each release, pin them.
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries_total"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
LOAD_BYTES = "vllm:kv_offload_load_bytes_total"
LOAD_TIME = "vllm:kv_offload_load_time_total"
STORE_BYTES = "vllm:kv_offload_store_bytes_total"
STORE_TIME = "vllm:kv_offload_store_time_total"
ALLOCATION_FAILURES = "vllm:kv_offload_allocation_failure_total"
PREFILL_TIME_SUM = "vllm:request_prefill_time_seconds_sum"
PREFILL_TIME_COUNT = "vllm:request_prefill_time_seconds_count"
# Per-tier series of the tiering spec (vLLM 0.33 and later), labelled tier="<i>:<type>".
TIER_CHUNK_QUERIES = "vllm:kv_offload_tiering_chunk_queries_total"
TIER_CHUNK_HITS = "vllm:kv_offload_tiering_chunk_hits_total"
TIER_READ_BYTES = "vllm:kv_offload_tiering_read_bytes_total"
TIER_READ_TIME = "vllm:kv_offload_tiering_read_time_total"
TIER_STORES_DROPPED = "vllm:kv_offload_tiering_backpressure_stores_dropped_total"
TIER_BLOCKS_DROPPED = "vllm:kv_offload_tiering_backpressure_blocks_dropped_total"

READ: tuple[str, ...] = (
    PREFIX_QUERIES,
    PREFIX_HITS,
    EXTERNAL_QUERIES,
    EXTERNAL_HITS,
    PROMPT_TOKENS_BY_SOURCE,
    LOAD_BYTES,
    LOAD_TIME,
    STORE_BYTES,
    STORE_TIME,
    ALLOCATION_FAILURES,
    PREFILL_TIME_SUM,
    PREFILL_TIME_COUNT,
    TIER_CHUNK_QUERIES,
    TIER_CHUNK_HITS,
    TIER_READ_BYTES,
    TIER_READ_TIME,
    TIER_STORES_DROPPED,
    TIER_BLOCKS_DROPPED,
)
# The labels that tell series apart after the pods are summed up.
KEPT_LABELS = ("source", "tier")

SOURCE_EXTERNAL = "external_kv_transfer"
SOURCE_LOCAL_COMPUTE = "local_compute"
SOURCE_LOCAL_HIT = "local_cache_hit"


@dataclass(frozen=True, order=True)
class SeriesKey:
    """One counter series of one pod: name, the pod, and the labels kvtier groups by."""

    name: str
    pod: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")


def key_of(name: str, labels: Mapping[str, str], pod: str) -> SeriesKey:
    kept = tuple(sorted((k, v) for k, v in labels.items() if k in KEPT_LABELS))
    return SeriesKey(name, pod, kept)


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counter values per series, read at `at` (seconds since the epoch)."""

    at: float
    values: Mapping[SeriesKey, float] = field(default_factory=dict)


def parse_exposition(text: str, pod: str, at: float, names: Iterable[str] = READ) -> Snapshot:
    """A pod's /metrics text (Prometheus text format) as a Snapshot of the series of `names`
    (vLLM's that kvtier reads, by default).

    Series of several engines in one pod are summed (their `engine` label is dropped)."""
    values: dict[SeriesKey, float] = {}
    wanted = set(names)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                key = key_of(sample.name, sample.labels, pod)
                values[key] = values.get(key, 0.0) + float(sample.value)
    return Snapshot(at, values)


def merge(snapshots: Iterable[Snapshot], at: float) -> Snapshot:
    """Several pods' snapshots as one (their keys differ by pod)."""
    values: dict[SeriesKey, float] = {}
    for snap in snapshots:
        values.update(snap.values)
    return Snapshot(at, values)


@dataclass(frozen=True)
class Increases:
    """Counter increases over a window, summed over pods, by (name, kept labels)."""

    seconds: float
    values: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]

    def get(self, name: str, **labels: str) -> float | None:
        """The increase of `name` with exactly these kept labels; None when not exported."""
        return self.values.get((name, tuple(sorted(labels.items()))))

    def exported(self, name: str) -> bool:
        return any(n == name for n, _ in self.values)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (n, labels), value in self.values.items():
            if n == name:
                value_of = dict(labels).get(label)
                if value_of is not None:
                    out[value_of] = out.get(value_of, 0.0) + value
        return out


def increases(before: Snapshot, after: Snapshot) -> Increases:
    """What each counter gained from `before` to `after`, summed over pods.

    A value that went down is a counter reset (a restarted pod): its new value is what it
    gained since. A series absent before counts from zero (a pod that started meanwhile)."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for key, now in after.values.items():
        was = before.values.get(key)
        gained = now if was is None or now < was else now - was
        group = (key.name, key.labels)
        out[group] = out.get(group, 0.0) + gained
    return Increases(max(0.0, after.at - before.at), out)
