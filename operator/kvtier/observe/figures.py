"""Per-tier figures over a window, from counter increases (pure).

Each figure is None when the counters behind it were not exported or saw no traffic, so a
missing figure never reads as zero. vLLM sums transfer times over the workers of a server
(every TP×PP worker reports its own), so wall time per block divides by their number.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.observe import series as s
from kvtier.observe.series import Increases


@dataclass(frozen=True)
class TierReads:
    """One tier of the tiering spec, by vLLM's tier label ("0:primary", "1:fs", ...)."""

    tier: str
    chunk_queries: float | None
    chunk_hits: float | None
    hit_ratio: float | None
    read_bytes: float | None
    read_bytes_per_second: float | None
    stores_dropped: float | None


@dataclass(frozen=True)
class Figures:
    window_seconds: float
    prompt_tokens: float
    tokens_from_offload: float | None
    tokens_recomputed: float | None
    tokens_local_hit: float | None
    external_queries: float | None
    external_hits: float | None
    external_hit_ratio: float | None
    restore_bytes: float | None
    restore_seconds: float | None
    restore_bytes_per_second: float | None
    blocks_restored: float | None
    load_seconds_per_block: float | None
    store_bytes: float | None
    stores_dropped: float | None
    prefill_seconds: float | None
    t_prefill_seconds_per_token: float | None
    tiers: tuple[TierReads, ...]


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _sum(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def tier_reads(inc: Increases) -> tuple[TierReads, ...]:
    queries = inc.by_label(s.TIER_CHUNK_QUERIES, "tier")
    hits = inc.by_label(s.TIER_CHUNK_HITS, "tier")
    read_bytes = inc.by_label(s.TIER_READ_BYTES, "tier")
    read_time = inc.by_label(s.TIER_READ_TIME, "tier")
    dropped = inc.by_label(s.TIER_STORES_DROPPED, "tier")
    labels = sorted(set(queries) | set(hits) | set(read_bytes) | set(dropped))
    return tuple(
        TierReads(
            tier=label,
            chunk_queries=queries.get(label),
            chunk_hits=hits.get(label),
            hit_ratio=_ratio(hits.get(label), queries.get(label)),
            read_bytes=read_bytes.get(label),
            read_bytes_per_second=_ratio(read_bytes.get(label), read_time.get(label)),
            stores_dropped=dropped.get(label),
        )
        for label in labels
    )


def figures(inc: Increases, block_bytes: int, workers: int = 1, min_tokens: float = 1) -> Figures:
    """The window's figures. `block_bytes` is the server-wide size of one offload block
    (status.sizing.blockBytes); `workers` the TP×PP workers whose transfer times vLLM adds
    up; t_prefill needs `min_tokens` computed locally in the window."""
    by_source = inc.by_label(s.PROMPT_TOKENS_BY_SOURCE, "source")
    recomputed = by_source.get(s.SOURCE_LOCAL_COMPUTE)
    restore_bytes = inc.get(s.LOAD_BYTES)
    restore_seconds = inc.get(s.LOAD_TIME)
    blocks = None if restore_bytes is None or block_bytes <= 0 else restore_bytes / block_bytes
    wall = None if restore_seconds is None else restore_seconds / max(1, workers)
    prefill = inc.get(s.PREFILL_TIME_SUM)
    t_prefill = (
        prefill / recomputed
        if prefill is not None and recomputed is not None and recomputed >= min_tokens
        else None
    )
    per_tier = tier_reads(inc)
    tier_drops = [t.stores_dropped for t in per_tier]
    return Figures(
        window_seconds=inc.seconds,
        prompt_tokens=sum(by_source.values()),
        tokens_from_offload=by_source.get(s.SOURCE_EXTERNAL),
        tokens_recomputed=recomputed,
        tokens_local_hit=by_source.get(s.SOURCE_LOCAL_HIT),
        external_queries=inc.get(s.EXTERNAL_QUERIES),
        external_hits=inc.get(s.EXTERNAL_HITS),
        external_hit_ratio=_ratio(inc.get(s.EXTERNAL_HITS), inc.get(s.EXTERNAL_QUERIES)),
        restore_bytes=restore_bytes,
        restore_seconds=restore_seconds,
        restore_bytes_per_second=_ratio(restore_bytes, wall),
        blocks_restored=blocks,
        load_seconds_per_block=_ratio(wall, blocks) if blocks and blocks >= 1 else None,
        store_bytes=inc.get(s.STORE_BYTES),
        stores_dropped=_sum(inc.get(s.ALLOCATION_FAILURES), *tier_drops),
        prefill_seconds=prefill,
        t_prefill_seconds_per_token=t_prefill,
        tiers=per_tier,
    )
