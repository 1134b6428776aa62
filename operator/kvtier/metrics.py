"""Prometheus metrics of the operator; every name starts with kvtier_."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

TIER_LABELS = ("namespace", "name")

WORKING_SET = Gauge(
    "kvtier_tier_working_set_bytes", "KV working set of one replica of the target.", TIER_LABELS
)
CPU_BYTES = Gauge("kvtier_tier_cpu_bytes", "CPU tier size (vLLM cpu_bytes_to_use).", TIER_LABELS)
CAPACITY = Gauge("kvtier_tier_capacity_bytes", "Capacity of each tier.", (*TIER_LABELS, "tier"))
FITS = Gauge("kvtier_tier_fits_in_cpu", "1 when the working set fits the CPU tier.", TIER_LABELS)
READY = Gauge("kvtier_tier_ready", "1 when the KVCacheTier is Ready.", TIER_LABELS)
INFO = Gauge(
    "kvtier_tier_info",
    "Always 1; labels carry topology, mode and target.",
    (*TIER_LABELS, "topology", "mode", "target_kind", "target"),
)
RECONCILES = Counter("kvtier_reconcile_total", "Reconciles by result.", ("result",))
RECONCILE_SECONDS = Histogram(
    "kvtier_reconcile_duration_seconds", "Time spent in one reconcile.", ("result",)
)
WRITES = Counter(
    "kvtier_api_writes_total", "Writes the operator sent to the API server.", ("verb", "kind")
)
WRITES_HELD = Counter(
    "kvtier_writes_suppressed_total",
    "Writes held back because the API server did not keep them last time (SchemaMismatch).",
    ("kind",),
)
PROBE_P99 = Gauge(
    "kvtier_probe_p99_seconds",
    "Latest fio p99 block latency of a disk tier.",
    (*TIER_LABELS, "tier"),
)
PROBE_P50 = Gauge(
    "kvtier_probe_p50_seconds",
    "Latest fio p50 block latency of a disk tier.",
    (*TIER_LABELS, "tier"),
)
PROBE_BANDWIDTH = Gauge(
    "kvtier_probe_bandwidth_bytes_per_second",
    "Latest fio read bandwidth of a disk tier.",
    (*TIER_LABELS, "tier"),
)
CROSSOVER = Gauge(
    "kvtier_crossover_tokens",
    "Context length above which restoring from the tier beats recompute.",
    (*TIER_LABELS, "tier"),
)
BENEFICIAL = Gauge(
    "kvtier_tier_beneficial",
    "1 when restoring from the disk tier beats recompute, 0 when it does not.",
    (*TIER_LABELS, "tier"),
)
EVENTS_DROPPED = Counter(
    "kvtier_events_dropped_total", "Events not recorded (queue full or refused by the API)."
)
PROBE_RUNS = Counter("kvtier_probe_runs_total", "fio probe Jobs started.")
PROBE_FAILURES = Counter("kvtier_probe_failures_total", "fio probes that failed or timed out.")
LAST_ERROR = Gauge("kvtier_last_error_timestamp_seconds", "Unix time of the last failed reconcile.")

# The label sets each tier has set, so forgetting a tier touches only its own series.
_SERIES: dict[tuple[str, str], list[tuple[Gauge, tuple[str, ...]]]] = {}


def _set(metric: Gauge, labels: tuple[str, ...], value: float) -> None:
    metric.labels(*labels).set(value)
    _SERIES.setdefault((labels[0], labels[1]), []).append((metric, labels))


def serve(port: int, addr: str = "0.0.0.0") -> None:
    start_http_server(port, addr=addr)


def observe_tier(
    namespace: str, name: str, tier: Mapping[str, Any], status: Mapping[str, Any]
) -> None:
    """Set the per-tier gauges from the status just decided."""
    forget_tier(namespace, name)
    sizing = status.get("sizing") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    tier_labels = (namespace, name)
    _set(READY, tier_labels, 1 if ready else 0)
    if sizing:
        _set(WORKING_SET, tier_labels, sizing.get("workingSetBytes") or 0)
        _set(CPU_BYTES, tier_labels, sizing.get("cpuBytesToUse") or 0)
        _set(FITS, tier_labels, 1 if sizing.get("fitsInCPU") else 0)
    for t in status.get("tiers") or []:
        labels = (namespace, name, t["name"])
        if t.get("capacityBytes") is not None:
            _set(CAPACITY, labels, t["capacityBytes"])
        if t.get("crossoverTokens") is not None:
            _set(CROSSOVER, labels, t["crossoverTokens"])
        if t.get("beneficial") is not None:
            _set(BENEFICIAL, labels, 1 if t["beneficial"] else 0)
        probe = t.get("probe") or {}
        for gauge, field in (
            (PROBE_P99, "p99Seconds"),
            (PROBE_P50, "p50Seconds"),
            (PROBE_BANDWIDTH, "bandwidthBytesPerSecond"),
        ):
            if probe.get(field) is not None:
                _set(gauge, labels, probe[field])
    spec = tier.get("spec") or {}
    ref = spec.get("targetRef") or {}
    mode = next((e["value"] for e in status.get("effective") or [] if e.get("field") == "mode"), "")
    info = (
        namespace,
        name,
        sizing.get("topology") or "",
        mode,
        ref.get("kind", ""),
        ref.get("name", ""),
    )
    _set(INFO, info, 1)


def forget_tier(namespace: str, name: str) -> None:
    """Drop every series of a tier (deleted, or about to be re-set)."""
    for metric, labels in _SERIES.pop((namespace, name), []):
        with contextlib.suppress(KeyError):
            metric.remove(*labels)
