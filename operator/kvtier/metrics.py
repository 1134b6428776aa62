"""Prometheus metrics of the operator; every name starts with kvtier_."""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socket import socket
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from kvtier.metrics_auth import METRICS_PATH, Authorizer
from kvtier.tiers.registry import TIERS

log = logging.getLogger("kvtier.metrics")

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
RESYNCS = Counter(
    "kvtier_resyncs_total", "Periodic passes that queued every tier again (--resync-seconds)."
)
QUEUE_DEPTH = Gauge(
    "kvtier_workqueue_depth", "Keys waiting in the work queue (tiers, and the policy)."
)
LEADER = Gauge(
    "kvtier_leader", "1 while this replica acts (it holds the Lease, or election is off)."
)
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

# vLLM's own metrics of a tier's model server over the observation window (kvtier.observe).
EFFECTIVE = Gauge(
    "kvtier_tier_effective",
    "1 when TierEffective is True, 0 when False; absent while Unknown.",
    TIER_LABELS,
)
OBSERVED = {
    field: Gauge(f"kvtier_observed_{metric}", help_text, TIER_LABELS)
    for field, metric, help_text in (
        ("externalHitRatio", "external_hit_ratio", "External prefix-cache hits over queries."),
        ("loadSecondsPerBlock", "load_seconds_per_block", "Mean time to load one offload block."),
        ("restoreBytesPerSecond", "restore_bytes_per_second", "Offload restore throughput."),
        ("tokensFromOffload", "tokens_from_offload", "Prompt tokens loaded from offload tiers."),
        ("tokensRecomputed", "tokens_recomputed", "Prompt tokens computed locally."),
        ("storesDropped", "stores_dropped", "Offload stores dropped in the window."),
        ("tPrefillSeconds", "t_prefill_seconds", "Prefill seconds per token the verdict used."),
    )
}
# A disk tier's fill, from its evictor's own gauges (kvtier.observe.disk).
DISK_PRESSURE = Gauge(
    "kvtier_tier_disk_pressure",
    "1 when a disk tier's DiskPressure is True (above its high watermark over the window), "
    "0 when False; absent while Unknown.",
    (*TIER_LABELS, "tier"),
)
USED = Gauge(
    "kvtier_tier_used_bytes",
    "Bytes in a disk tier, by its evictor (the fullest pod's for NVMe).",
    (*TIER_LABELS, "tier"),
)
VLLM_TIER_HIT_RATIO = Gauge(
    "kvtier_observed_vllm_tier_hit_ratio",
    "Chunk hit ratio of one tier of vLLM's tiering spec (vLLM 0.33+).",
    (*TIER_LABELS, "vllm_tier"),
)

# The label sets each tier has set, so forgetting a tier touches only its own series.
_SERIES: dict[tuple[str, str], list[tuple[Gauge, tuple[str, ...]]]] = {}


def _set(metric: Gauge, labels: tuple[str, ...], value: float) -> None:
    metric.labels(*labels).set(value)
    _SERIES.setdefault((labels[0], labels[1]), []).append((metric, labels))


@dataclass(frozen=True)
class TLSFiles:
    """The serving certificate (chain) and its key, PEM files."""

    cert: Path
    key: Path


class _ReloadingContext:
    """A server SSLContext rebuilt when the files change: the OpenShift service CA renews
    the serving certificate in the mounted Secret while the operator keeps running."""

    def __init__(self, files: TLSFiles) -> None:
        self._files = files
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._context = self._load()

    def _load(self) -> ssl.SSLContext:
        stamp = (os.stat(self._files.cert).st_mtime_ns, os.stat(self._files.key).st_mtime_ns)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._files.cert, self._files.key)
        self._stamp = stamp
        return context

    def get(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = (
                    os.stat(self._files.cert).st_mtime_ns,
                    os.stat(self._files.key).st_mtime_ns,
                )
                if stamp != self._stamp:
                    self._context = self._load()
            except (OSError, ssl.SSLError) as exc:  # mid-rotation: keep the previous pair
                log.warning("metrics certificate not reloaded: %s", exc)
            return self._context


class _MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # the name http.server calls
        if self.path.split("?", 1)[0] != METRICS_PATH:
            self._reply(404, b"not found\n")
            return
        if self.server.authorizer is not None:
            verdict = self.server.authorizer.check(self.headers.get("Authorization"))
            if verdict.status != 200:
                extra = {"WWW-Authenticate": "Bearer"} if verdict.status == 401 else {}
                self._reply(verdict.status, f"{verdict.reason}\n".encode(), extra)
                return
        self._reply(200, generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

    def _reply(
        self,
        status: int,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics %s: " + format, self.address_string(), *args)


class MetricsServer(ThreadingHTTPServer):
    """/metrics over HTTPS for scrapers the API server authorizes, or plain HTTP to anyone
    when neither TLS nor an authorizer is given (local runs)."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        tls: TLSFiles | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.tls = _ReloadingContext(tls) if tls else None
        self.authorizer = authorizer
        super().__init__(address, _MetricsHandler)

    def get_request(self) -> tuple[socket, Any]:
        sock, address = super().get_request()
        if self.tls is None:
            return sock, address
        # The handshake runs on first read, in the request's own thread, so a slow or
        # plain-HTTP client never blocks the accept loop.
        wrapped = self.tls.get().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics request from %s failed", client_address, exc_info=True)


def serve(
    port: int,
    addr: str = "0.0.0.0",
    tls: TLSFiles | None = None,
    authorizer: Authorizer | None = None,
) -> MetricsServer:
    """Start the metrics server in a daemon thread and return it."""
    server = MetricsServer((addr, port), tls, authorizer)
    threading.Thread(target=server.serve_forever, name="kvtier-metrics", daemon=True).start()
    return server


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
        if t.get("usedBytes") is not None:
            _set(USED, labels, t["usedBytes"])
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
    _observed(tier_labels, status)
    _disk_pressure(tier_labels, status)


# status.tiers names of the tier types whose evictor reports DiskPressure (nvme, cephfs).
_EVICTED = frozenset(t.status_name for t in TIERS if t.evicted)


def _disk_pressure(labels: tuple[str, str], status: Mapping[str, Any]) -> None:
    pressure = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "DiskPressure"), None
    )
    disk = next((t for t in status.get("tiers") or [] if t["name"] in _EVICTED), None)
    if pressure is not None and disk is not None and pressure.get("status") in ("True", "False"):
        _set(DISK_PRESSURE, (*labels, disk["name"]), 1 if pressure["status"] == "True" else 0)


def _observed(labels: tuple[str, str], status: Mapping[str, Any]) -> None:
    effective = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "TierEffective"), None
    )
    if effective is not None and effective.get("status") in ("True", "False"):
        _set(EFFECTIVE, labels, 1 if effective["status"] == "True" else 0)
    observed = status.get("observed") or {}
    for field, gauge in OBSERVED.items():
        if observed.get(field) is not None:
            _set(gauge, labels, observed[field])
    for t in observed.get("tiers") or []:
        if t.get("chunkHitRatio") is not None:
            _set(VLLM_TIER_HIT_RATIO, (*labels, t["tier"]), t["chunkHitRatio"])


def forget_tier(namespace: str, name: str) -> None:
    """Drop every series of a tier (deleted, or about to be re-set)."""
    for metric, labels in _SERIES.pop((namespace, name), []):
        with contextlib.suppress(KeyError):
            metric.remove(*labels)
