"""One eviction pass over a tier directory, and the loop that repeats it.

A pass: take (or keep) the tier's lock, read the volume's statistics, scan the tree, and when
the volume or the capacity given to the tier is at or above the high watermark, delete the
least recently used unprotected block files until both are at or below the low watermark.

In the loop a pass may skip the walk: the tier's usage is then estimated from the last walk
plus the volume's growth since (statvfs, one system call), and the walk happens once that
estimate is halfway to the high watermark, or when the last walk is FULL_WALK_SECONDS old.
A walk of a 500,000-file tier takes seconds of a core and, on CephFS, half a million
metadata requests: not something to repeat every minute while the tier is far from full.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kvtier.evict.errors import EvictError
from kvtier.evict.lock import EvictorLock
from kvtier.evict.policy import (
    Bound,
    Watermarks,
    batch_end,
    bytes_to_free,
    lru_order,
    walk_needed,
)
from kvtier.evict.remove import Outcome, Remover
from kvtier.evict.scan import Candidates, scan
from kvtier.evict.tier_dir import TierDir

DEFAULT_INTERVAL_SECONDS = 60.0
FULL_WALK_SECONDS = 600.0  # a walk at least this often, whatever the estimate says
BATCH = 8192  # files deleted per batch: their paths, sorted, are all a pass holds as text


@dataclass(frozen=True)
class Options:
    watermarks: Watermarks = field(default_factory=Watermarks)
    protect_seconds: float = 300.0
    capacity_bytes: int | None = None  # the tier's own bound, besides the volume's size
    dry_run: bool = False


@dataclass
class PassResult:
    directory: str
    acted: bool  # False: another evictor holds the lock (see holder)
    started_at: float
    holder: str | None = None
    duration_seconds: float = 0.0
    high: float = 0.0
    low: float = 0.0
    volume_used_bytes: int = 0  # statvfs: used and size (used + available to users)
    volume_size_bytes: int = 0
    capacity_bytes: int = 0  # the smaller of the volume's size and --capacity
    used_bytes: int = 0  # the bytes of the files in the tier directory
    usage_ratio: float = 0.0  # of the fuller bound: what the watermarks apply to
    files: int = 0
    block_files: int = 0
    protected_files: int = 0
    skipped_dirs: int = 0
    bytes_to_free: int = 0
    evicted_files: int = 0
    evicted_bytes: int = 0
    in_use_files: int = 0  # chosen, but used since the scan: kept
    vanished_files: int = 0
    refused_files: int = 0
    failed_files: int = 0
    usage_ratio_after: float = 0.0  # estimated from what was freed
    above_high: bool = False  # still at or above the high watermark after the pass
    dry_run: bool = False
    walked: bool = True  # False: usage estimated from the last walk and the volume's growth
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(_camel(asdict(self)), separators=(",", ":"))

    def describe(self) -> str:
        """One line for a person."""
        if not self.acted:
            return f"{self.directory}: standing by, {self.holder} holds the lock"
        if not self.walked:
            return (
                f"{self.directory}: about {self.usage_ratio:.1%} used "
                f"(high {self.high:.0%}, low {self.low:.0%}), estimated without a walk"
            )
        verb = "would evict" if self.dry_run else "evicted"
        line = (
            f"{self.directory}: {self.usage_ratio:.1%} used "
            f"(high {self.high:.0%}, low {self.low:.0%}), {self.files:,} files; "
            f"{verb} {self.evicted_files:,} files, {self.evicted_bytes:,} B "
            f"in {self.duration_seconds:.2f} s"
        )
        if self.bytes_to_free:
            line += f"; now {self.usage_ratio_after:.1%}"
        if self.above_high:
            line += "; still above the high watermark (the rest is protected or in use)"
        return line


@dataclass(frozen=True)
class LastWalk:
    """What the last walk left: the tier's bytes and the volume's used bytes after its
    deletions, to estimate the tier's usage without walking."""

    at: float
    used_bytes: int
    volume_used_bytes: int
    files: int
    block_files: int

    @classmethod
    def of(cls, result: PassResult) -> LastWalk | None:
        if not (result.acted and result.walked):
            return None
        gone = 0 if result.dry_run else result.evicted_bytes
        files = 0 if result.dry_run else result.evicted_files
        return cls(
            at=result.started_at,
            used_bytes=result.used_bytes - gone,
            volume_used_bytes=result.volume_used_bytes - gone,
            files=result.files - files,
            block_files=result.block_files - files,
        )


def run_pass(
    tier: TierDir,
    lock: EvictorLock,
    options: Options,
    *,
    last: LastWalk | None = None,
    clock: Callable[[], float] = time.time,
    stop: threading.Event | None = None,
) -> PassResult:
    """One pass; with `last` (the loop's previous walk) it may estimate instead of walking."""
    started = clock()
    start = time.perf_counter()
    marks = options.watermarks
    result = PassResult(tier.path, acted=lock.acquire(), started_at=started)
    result.high, result.low, result.dry_run = marks.high, marks.low, options.dry_run
    if not result.acted:
        result.holder = lock.holder()
        return result
    volume = volume_bound(os.fstatvfs(tier.fd))
    if last is not None and started - last.at < FULL_WALK_SECONDS:
        grown = max(0, volume.used - last.volume_used_bytes)
        estimates = [volume]
        if options.capacity_bytes is not None:
            used = last.used_bytes + grown
            estimates.append(Bound("capacity", used=used, size=options.capacity_bytes))
        if not walk_needed(estimates, marks):
            result.walked = False
            result.volume_used_bytes, result.volume_size_bytes = volume.used, volume.size
            result.capacity_bytes = min(b.size for b in estimates)
            result.used_bytes = last.used_bytes + grown
            result.usage_ratio = result.usage_ratio_after = max(b.ratio for b in estimates)
            result.files, result.block_files = last.files, last.block_files
            result.duration_seconds = time.perf_counter() - start
            return result
    found = scan(tier, started, options.protect_seconds)
    bounds = [volume]
    if options.capacity_bytes is not None:
        bounds.append(Bound("capacity", used=found.bytes, size=options.capacity_bytes))
    need = bytes_to_free(bounds, marks)
    result.volume_used_bytes, result.volume_size_bytes = volume.used, volume.size
    result.capacity_bytes = min(b.size for b in bounds)
    result.used_bytes = found.bytes
    result.usage_ratio = max(b.ratio for b in bounds)
    result.files, result.block_files = found.files, found.block_files
    result.protected_files, result.skipped_dirs = found.protected_files, found.skipped_dirs
    result.notes = list(found.notes)
    result.bytes_to_free = need
    freed = 0
    if need:
        freed = _evict(tier, found.candidates, need, options, result, clock, stop)
    after = [Bound(b.name, max(0, b.used - freed), b.size) for b in bounds]
    result.usage_ratio_after = max(b.ratio for b in after)
    result.above_high = any(b.used >= marks.high * b.size for b in after)
    result.duration_seconds = time.perf_counter() - start
    return result


def volume_bound(vfs: os.statvfs_result) -> Bound:
    """The volume by its own statistics, as df shows it: size is what users can fill (used
    plus available: blocks reserved for root do not count), so 100 % is when writes fail."""
    used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
    return Bound("volume", used=used, size=used + vfs.f_bavail * vfs.f_frsize)


def _evict(
    tier: TierDir,
    found: Candidates,
    need: int,
    options: Options,
    result: PassResult,
    clock: Callable[[], float],
    stop: threading.Event | None,
) -> int:
    """Delete in least-recently-used order until `need` bytes are freed. Each batch (the
    oldest files that would cover what is still needed, at most BATCH) is deleted in path
    order, so that neighbours share their directories' descriptors; files kept (in use,
    vanished) only make the next batch reach further down the order."""
    order = lru_order(found.used_at)
    remover = Remover(tier, options.protect_seconds, dry_run=options.dry_run, clock=clock)
    freed = 0
    start = 0
    try:
        while freed < need and start < len(order) and not (stop and stop.is_set()):
            end = min(batch_end(order, start, found.sizes, need - freed), start + BATCH)
            batch = sorted((found.path(i), i) for i in order[start:end])
            for path, i in batch:
                outcome, size = remover.remove(path, found.used_at[i], found.inodes[i])
                freed += size
                if outcome is Outcome.REMOVED:
                    result.evicted_files += 1
                elif outcome is Outcome.IN_USE:
                    result.in_use_files += 1
                elif outcome is Outcome.VANISHED:
                    result.vanished_files += 1
                elif outcome is Outcome.REFUSED:
                    result.refused_files += 1
                else:
                    result.failed_files += 1
            start = end
    finally:
        remover.close()
    if remover.last_error:
        result.notes.append(remover.last_error)
    result.evicted_bytes = freed
    return freed


def run_loop(
    tier: TierDir,
    lock: EvictorLock,
    options: Options,
    interval_seconds: float,
    stop: threading.Event,
    on_pass: Callable[[PassResult], None],
    on_error: Callable[[str], None],
) -> None:
    """A pass every interval until `stop` is set; a failed pass is reported and the next one
    tries again (a volume can come back), so the loop itself never ends on an error."""
    last: LastWalk | None = None
    try:
        while not stop.is_set():
            try:
                result = run_pass(tier, lock, options, last=last, stop=stop)
            except (OSError, EvictError) as exc:
                last = None
                on_error(_message(tier, exc))
            else:
                if result.walked:
                    last = LastWalk.of(result)
                on_pass(result)
            stop.wait(interval_seconds)
    finally:
        lock.release()


def _message(tier: TierDir, exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"{exc.filename or tier.path}: {exc.strerror or exc}"
    return str(exc)


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    """snake_case keys → camelCase, as the KVCacheTier status spells its fields."""
    out = {}
    for key, value in data.items():
        head, *rest = key.split("_")
        out[head + "".join(part.title() for part in rest)] = value
    return out
