"""The evictor's Prometheus metrics, in a registry of its own (the evictor runs alone in a
sidecar or a small Deployment; nothing of the operator's belongs there)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from kvtier.evict.run import PassResult


class EvictMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.used = Gauge("kvtier_evict_used_bytes", "Bytes of the files in the tier.", registry=r)
        self.capacity = Gauge(
            "kvtier_evict_capacity_bytes",
            "The smaller of the volume's size and the tier's capacity (--capacity).",
            registry=r,
        )
        self.volume_used = Gauge(
            "kvtier_evict_volume_used_bytes", "Used bytes of the volume (statvfs).", registry=r
        )
        self.volume_size = Gauge(
            "kvtier_evict_volume_size_bytes",
            "Size of the volume available to users (statvfs).",
            registry=r,
        )
        self.usage = Gauge(
            "kvtier_evict_usage_ratio",
            "Used over size of the fuller of volume and capacity; the watermarks apply to it.",
            registry=r,
        )
        self.high = Gauge("kvtier_evict_high_watermark_ratio", "--high.", registry=r)
        self.low = Gauge("kvtier_evict_low_watermark_ratio", "--low.", registry=r)
        self.files = Gauge("kvtier_evict_files", "Regular files in the tier.", registry=r)
        self.block_files = Gauge(
            "kvtier_evict_block_files", "vLLM block files in the tier.", registry=r
        )
        self.evicted_bytes = Counter(
            "kvtier_evict_evicted_bytes", "Bytes of block files deleted.", registry=r
        )
        self.evicted_files = Counter(
            "kvtier_evict_evicted_files", "Block files deleted.", registry=r
        )
        self.passes = Counter(
            "kvtier_evict_passes",
            "Passes by result: evicted, idle (below the watermark), estimated (no walk: far "
            "below it), standby (another evictor holds the lock), error.",
            ["result"],
            registry=r,
        )
        self.last_run = Gauge(
            "kvtier_evict_last_run_timestamp_seconds", "Unix time of the last pass.", registry=r
        )
        self.last_duration = Gauge(
            "kvtier_evict_last_run_duration_seconds", "Wall time of the last pass.", registry=r
        )
        self.above_high = Gauge(
            "kvtier_evict_above_high_watermark",
            "1 when the tier was still at or above its high watermark after the last pass.",
            registry=r,
        )
        self.leader = Gauge(
            "kvtier_evict_leader", "1 while this evictor holds the tier's lock.", registry=r
        )

    def observe(self, result: PassResult) -> None:
        self.last_run.set(result.started_at)
        self.leader.set(1 if result.acted else 0)
        if not result.acted:
            self.passes.labels("standby").inc()
            return
        self.last_duration.set(result.duration_seconds)
        if not result.walked:
            self.passes.labels("estimated").inc()
            self.used.set(result.used_bytes)
            self.volume_used.set(result.volume_used_bytes)
            self.usage.set(result.usage_ratio)
            return
        self.passes.labels("evicted" if result.bytes_to_free else "idle").inc()
        gone_bytes, gone_files = (
            (0, 0)
            if result.dry_run
            else (
                result.evicted_bytes,
                result.evicted_files,
            )
        )
        self.used.set(max(0, result.used_bytes - gone_bytes))
        self.capacity.set(result.capacity_bytes)
        self.volume_used.set(max(0, result.volume_used_bytes - gone_bytes))
        self.volume_size.set(result.volume_size_bytes)
        self.usage.set(result.usage_ratio if result.dry_run else result.usage_ratio_after)
        self.high.set(result.high)
        self.low.set(result.low)
        self.files.set(result.files - gone_files)
        self.block_files.set(result.block_files - gone_files)
        self.evicted_bytes.inc(gone_bytes)
        self.evicted_files.inc(gone_files)
        self.above_high.set(1 if result.above_high and not result.dry_run else 0)

    def error(self) -> None:
        self.passes.labels("error").inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
