"""kvtier evict's /metrics text for tests, rendered by the evictor's own metrics code
(kvtier.evict.metrics) from the pass a scripted fill level would produce."""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from kvtier.evict.metrics import EvictMetrics
from kvtier.evict.run import PassResult

CAPACITY = 100 * 2**30  # a 100 GiB tier
HIGH, LOW = 0.85, 0.70


def walked_pass(usage: float, capacity: int = CAPACITY) -> PassResult:
    """A pass that found the tier `usage` full and could free nothing (every file protected
    or in use), so it stays where it was."""
    used = int(usage * capacity)
    return PassResult(
        directory="/kv",
        acted=True,
        started_at=time.time(),
        high=HIGH,
        low=LOW,
        volume_used_bytes=used,
        volume_size_bytes=capacity,
        capacity_bytes=capacity,
        used_bytes=used,
        usage_ratio=usage,
        usage_ratio_after=usage,
        bytes_to_free=max(0, used - int(LOW * capacity)) if usage >= HIGH else 0,
        above_high=usage >= HIGH,
    )


def exposition(usage: float | None, capacity: int = CAPACITY) -> bytes:
    """An evictor's exposition after one pass at `usage`; None: a standby evictor (another
    one holds the tier's lock)."""
    metrics = EvictMetrics()
    if usage is None:
        metrics.observe(PassResult(directory="/kv", acted=False, started_at=time.time()))
    else:
        metrics.observe(walked_pass(usage, capacity))
    return generate_latest(metrics.registry)
