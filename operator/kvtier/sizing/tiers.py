"""Restore or recompute: is a disk tier faster than prefilling the context again?

The study's rule: t_prefill = baseline TTFT / context length (TTFT measured with offload off),
and the crossover L = T_p99 / t_prefill, with T_p99 the tier's fio p99 latency at the model's
block size. Contexts longer than L restore faster than they recompute. A tier's bandwidth
bounds it too: restoring an average context moves blocks × block bytes, which must take less
time than recomputing it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kvtier.sizing.errors import SizingError

DISK_TYPES: tuple[str, ...] = ("NVMe", "CephFS", "ObjectStore")
_DISK_ALIASES = {
    "nvme": "NVMe",
    "cephfs": "CephFS",
    "objectstore": "ObjectStore",
    "s3": "ObjectStore",
    "rgw": "ObjectStore",
}


def normalize_disk_type(name: str, field: str) -> str:
    """Canonical disk type name (NVMe, CephFS, ObjectStore) from any case or alias."""
    canonical = _DISK_ALIASES.get(name.strip().lower().replace("-", ""))
    if canonical is None:
        raise SizingError(field, f"unknown disk type {name!r}; use {'|'.join(DISK_TYPES)}")
    return canonical


def crossover_tokens(p99_seconds: float, ttft_seconds: float, context_tokens: int) -> int:
    """L = T_p99 / t_prefill, rounded up to whole tokens.

    Decimal keeps worked numbers exact (0.6 s p99 at 60 s TTFT for 50,000 tokens is 500).
    """
    prefill = Decimal(str(ttft_seconds)) / context_tokens
    return math.ceil(Decimal(str(p99_seconds)) / prefill)


def bandwidth_restore_seconds(
    context_tokens: int, block_tokens: int, block_bytes: int, bandwidth: float
) -> float:
    """Time to move a context's blocks (whole blocks: a partial one is stored whole)."""
    blocks = math.ceil(context_tokens / block_tokens)
    return blocks * block_bytes / bandwidth


def restore_seconds(
    context_tokens: int,
    block_tokens: int,
    block_bytes: int,
    p99_seconds: float | None,
    bandwidth: float | None,
) -> float:
    """Latency plus transfer: the restore curve drawn against recompute by `kvtier plan --plot`."""
    transfer = (
        bandwidth_restore_seconds(context_tokens, block_tokens, block_bytes, bandwidth)
        if bandwidth
        else 0.0
    )
    return (p99_seconds or 0.0) + transfer


@dataclass(frozen=True)
class TierAssessment:
    """Restore-vs-recompute verdict for one disk tier; None where a measurement is missing."""

    name: str
    selected: bool
    p99_seconds: float | None
    bandwidth_bytes_per_second: int | None
    crossover_tokens: int | None
    restore_blocks_per_second: float | None
    restore_seconds: float | None
    recompute_seconds: float | None
    beneficial: bool | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "selected": self.selected,
            "p99Seconds": self.p99_seconds,
            "bandwidthBytesPerSecond": self.bandwidth_bytes_per_second,
            "crossoverTokens": self.crossover_tokens,
            "restoreBlocksPerSecond": self.restore_blocks_per_second,
            "restoreSeconds": self.restore_seconds,
            "recomputeSeconds": self.recompute_seconds,
            "beneficial": self.beneficial,
            "reason": self.reason,
        }


def assess_tier(
    name: str,
    *,
    selected: bool,
    context_tokens: int,
    block_tokens: int,
    block_bytes: int,
    ttft_seconds: float | None,
    p99_seconds: float | None,
    bandwidth: float | None,
) -> TierAssessment:
    """Compare restoring an average context from this tier with recomputing it."""
    crossover = None
    restore = None
    verdicts: list[tuple[bool, str]] = []
    if p99_seconds is not None and ttft_seconds is not None:
        crossover = crossover_tokens(p99_seconds, ttft_seconds, context_tokens)
        wins = context_tokens > crossover
        verdicts.append(
            (
                wins,
                f"crossover {crossover:,} tokens (p99 {p99_seconds:g} s ÷ prefill "
                f"{ttft_seconds / context_tokens * 1000:.3g} ms/token) "
                f"{'<' if wins else '≥'} {context_tokens:,}-token context",
            )
        )
    if bandwidth is not None:
        restore = bandwidth_restore_seconds(context_tokens, block_tokens, block_bytes, bandwidth)
        if ttft_seconds is not None:
            wins = restore < ttft_seconds
            verdicts.append(
                (
                    wins,
                    f"restoring a {context_tokens:,}-token context at {bandwidth / 1e6:.4g} MB/s "
                    f"takes {restore:.3g} s {'<' if wins else '≥'} recompute {ttft_seconds:g} s",
                )
            )
    if ttft_seconds is None:
        beneficial = None
        reason = "no baseline TTFT (offload off): cannot compare restore with recompute"
    elif not verdicts:
        beneficial = None
        reason = "not measured: give the tier's fio p99 latency and/or bandwidth"
    else:
        beneficial = all(ok for ok, _ in verdicts)
        # Name what decided it: every check when restore wins, the failing ones otherwise.
        shown = [text for ok, text in verdicts if ok == beneficial]
        reason = ("restore wins: " if beneficial else "recompute wins: ") + "; ".join(shown)
    return TierAssessment(
        name=name,
        selected=selected,
        p99_seconds=p99_seconds,
        bandwidth_bytes_per_second=None if bandwidth is None else round(bandwidth),
        crossover_tokens=crossover,
        restore_blocks_per_second=round(bandwidth / block_bytes, 2) if bandwidth else None,
        restore_seconds=round(restore, 3) if restore is not None else None,
        recompute_seconds=ttft_seconds,
        beneficial=beneficial,
        reason=reason,
    )
