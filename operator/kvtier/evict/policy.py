"""Which block files to delete: watermarks, protection age and least-recently-used order.

Pure functions over numbers; the scan (scan.py) supplies them and the pass (run.py) acts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_HIGH = 0.85  # llm-d's PVC evictor starts at 85 % used ...
DEFAULT_LOW = 0.70  # ... and stops at 70 %
DEFAULT_PROTECT_SECONDS = 300


@dataclass(frozen=True)
class Watermarks:
    """Start deleting at `high` (a fraction of the capacity), stop at `low`."""

    high: float = DEFAULT_HIGH
    low: float = DEFAULT_LOW

    def __post_init__(self) -> None:
        for name, value in (("high", self.high), ("low", self.low)):
            if not (math.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"--{name}: must be a fraction in (0, 1], got {value:g}")
        if self.low >= self.high:
            raise ValueError(f"--low: must be below --high ({self.high:g}), got {self.low:g}")


@dataclass(frozen=True)
class Bound:
    """One limit the tier must stay under: the volume, or the capacity given to the tier."""

    name: str  # "volume" (the file system's own statistics) or "capacity" (--capacity)
    used: int
    size: int

    @property
    def ratio(self) -> float:
        return self.used / self.size if self.size > 0 else 1.0


def bytes_to_free(bounds: Iterable[Bound], marks: Watermarks) -> int:
    """0 while every bound is below the high watermark; once one reaches it, the bytes to
    delete so that every bound is at or below the low watermark."""
    bounds = list(bounds)
    if not any(b.used >= marks.high * b.size for b in bounds):
        return 0
    return max(0, *(b.used - math.floor(marks.low * b.size) for b in bounds))


def walk_needed(estimates: Iterable[Bound], marks: Watermarks) -> bool:
    """Whether a pass must walk the tree, from bounds estimated without walking it: once
    any is halfway from the low watermark to the high one. Below that, the tier's growth
    since the last walk (which the volume's statistics show) cannot have reached high."""
    halfway = (marks.high + marks.low) / 2
    return any(b.used >= halfway * b.size for b in estimates)


def last_use(atime: float, mtime: float) -> float:
    """When a file was last read or written. mtime counts too: with `noatime` a read is never
    recorded, and with `relatime` only the first read after a write (or after a day) is."""
    return atime if atime > mtime else mtime


def is_protected(used_at: float, now: float, protect_seconds: float) -> bool:
    """A file read or written within the last protect_seconds is never deleted."""
    return used_at > now - protect_seconds


def lru_order(used_at: Sequence[float]) -> list[int]:
    """Indices of the files, least recently used first (ties keep their scan order)."""
    return sorted(range(len(used_at)), key=used_at.__getitem__)


def batch_end(order: Sequence[int], start: int, sizes: Sequence[int], need: int) -> int:
    """The end of the shortest run order[start:end] whose sizes add up to `need` (or the
    end of order when all of it is not enough)."""
    total = 0
    end = start
    while end < len(order) and total < need:
        total += sizes[order[end]]
        end += 1
    return end
