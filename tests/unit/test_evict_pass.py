"""One `kvtier evict` pass on real directories and files on this machine's disk.

A test cannot fill the machine's file system, so the watermarks bite through the tier's
capacity (`--capacity`, Options.capacity_bytes): the same bound the operator sets from the
tier's size. test_evict_statvfs.py covers the volume's own statistics.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.evict import EvictorLock, Options, PassResult, TierDir, Watermarks, open_tier_dir, run
from kvtier.evict.run import FULL_WALK_SECONDS, LastWalk, run_pass, volume_bound
from tests.unit.evict_tree import BASE, BLOCK_BYTES, block_path, make_tier, write_block

DAY = 86400.0


@pytest.fixture
def tier(roomy_tmp_path: Path) -> Iterator[TierDir]:
    opened = open_tier_dir(str(roomy_tmp_path))
    yield opened
    opened.close()


def tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def evict(
    tier: TierDir, capacity: int, last: LastWalk | None = None, **options: object
) -> PassResult:
    lock = EvictorLock(tier)
    try:
        return run_pass(tier, lock, Options(capacity_bytes=capacity, **options), last=last)  # type: ignore[arg-type]
    finally:
        lock.release()


def capacity_for(root: Path, ratio: float) -> int:
    """A capacity the tree (with the lock file a pass adds) fills to `ratio`."""
    return int((tree_bytes(root) + 128) / ratio)


def test_a_pass_past_the_high_watermark_ends_below_the_low_one(
    roomy_tmp_path: Path, tier: TierDir
) -> None:
    blocks = make_tier(roomy_tmp_path, 200, oldest=time.time() - DAY)
    capacity = capacity_for(roomy_tmp_path, 0.90)
    result = evict(tier, capacity)
    assert result.acted and result.usage_ratio >= 0.85
    left = tree_bytes(roomy_tmp_path)
    assert left <= 0.70 * capacity, "the pass must end at or below the low watermark"
    assert left > 0.70 * capacity - BLOCK_BYTES, "and delete no more than that"
    assert result.evicted_bytes == result.evicted_files * BLOCK_BYTES
    assert sum(not p.exists() for p in blocks) == result.evicted_files
    assert not result.above_high and result.usage_ratio_after <= 0.70
    # Between the watermarks a pass deletes nothing (hysteresis).
    again = evict(tier, capacity)
    assert again.bytes_to_free == 0 and again.evicted_files == 0


def test_below_the_high_watermark_nothing_is_deleted(roomy_tmp_path: Path, tier: TierDir) -> None:
    blocks = make_tier(roomy_tmp_path, 50, oldest=time.time() - DAY)
    result = evict(tier, capacity_for(roomy_tmp_path, 0.84))
    assert result.evicted_files == 0 and result.bytes_to_free == 0
    assert all(p.exists() for p in blocks)


def test_least_recently_used_go_first_reads_count(roomy_tmp_path: Path, tier: TierDir) -> None:
    """Written oldest-first; the even ones were read an hour ago (atime set by os.utime), so
    the odd ones, never read since their write, are the least recently used."""
    now = time.time()
    blocks = make_tier(roomy_tmp_path, 40, oldest=now - DAY, step=60)
    for path in blocks[::2]:
        os.utime(path, (now - 3600, path.stat().st_mtime))
    result = evict(tier, capacity_for(roomy_tmp_path, 0.90))
    gone = [i for i, p in enumerate(blocks) if not p.exists()]
    assert len(gone) == result.evicted_files > 0
    odd = list(range(1, 40, 2))
    assert gone == odd[: len(gone)], "the oldest unread blocks, in write order"


def test_recently_used_files_are_protected(roomy_tmp_path: Path, tier: TierDir) -> None:
    now = time.time()
    old = make_tier(roomy_tmp_path, 5, oldest=now - DAY)
    fresh = [write_block(block_path(roomy_tmp_path, 100 + i), now - 30) for i in range(60)]
    result = evict(tier, capacity_for(roomy_tmp_path, 0.99), protect_seconds=300)
    assert all(not p.exists() for p in old), "all unprotected blocks go first"
    assert all(p.exists() for p in fresh), "used 30 s ago, protected for 300 s"
    assert result.protected_files == 60
    assert result.above_high, "still full: the rest is protected"


def test_only_vllm_block_files_are_deleted(roomy_tmp_path: Path, tier: TierDir) -> None:
    old = time.time() - DAY
    blocks = make_tier(roomy_tmp_path, 5, oldest=old)
    keep = [
        roomy_tmp_path / BASE / "config.json",
        write_block(roomy_tmp_path / "notes.bin", old),  # not in a rank directory
        write_block(roomy_tmp_path / f"{BASE}_r0" / "stray.bin", old),  # wrong depth
        write_block(roomy_tmp_path / "data_r0" / "abc" / "de_g0" / "abcde.bin", old),  # no digest
        write_block(block_path(roomy_tmp_path, 1).with_suffix(".json"), old),
    ]
    misplaced = block_path(roomy_tmp_path, 2)  # a block file under another block's directories
    keep.append(write_block(block_path(roomy_tmp_path, 3).parent / misplaced.name, old))
    linked = block_path(roomy_tmp_path, 4)
    os.link(linked, roomy_tmp_path / "elsewhere")  # a second name: not a file vLLM wrote
    result = evict(tier, capacity=1)
    assert all(p.exists() for p in keep)
    assert linked.exists()
    assert [p.exists() for p in blocks] == [False, False, False, False, True]
    assert result.evicted_files == 4 and result.above_high


def test_a_killed_writers_temporary_file_goes_a_fresh_one_stays(
    roomy_tmp_path: Path, tier: TierDir
) -> None:
    now = time.time()
    make_tier(roomy_tmp_path, 1, oldest=now - DAY)
    stale = write_block(Path(f"{block_path(roomy_tmp_path, 7)}_123456789.tmp"), now - DAY)
    writing = write_block(Path(f"{block_path(roomy_tmp_path, 8)}_987654321.tmp"), now)
    evict(tier, capacity=1)
    assert not stale.exists()
    assert writing.exists()


def test_dry_run_deletes_nothing(roomy_tmp_path: Path, tier: TierDir) -> None:
    blocks = make_tier(roomy_tmp_path, 20, oldest=time.time() - DAY)
    result = evict(tier, capacity_for(roomy_tmp_path, 0.95), dry_run=True)
    assert result.evicted_files > 0 and result.dry_run
    assert all(p.exists() for p in blocks)


def test_watermarks_are_options(roomy_tmp_path: Path, tier: TierDir) -> None:
    make_tier(roomy_tmp_path, 100, oldest=time.time() - DAY)
    capacity = capacity_for(roomy_tmp_path, 0.60)
    result = evict(tier, capacity, watermarks=Watermarks(high=0.5, low=0.25))
    assert result.evicted_files > 0
    assert tree_bytes(roomy_tmp_path) <= 0.25 * capacity


def walked_at(root: Path, at: float, slack: int = 1 << 30) -> LastWalk:
    """A previous walk that found the tree as it is now. The volume's used bytes then are
    set `slack` above today's, so that other writers on this machine's disk between now and
    the pass do not count as the tier's growth."""
    used = volume_bound(os.statvfs(root)).used + slack
    files = [p for p in root.rglob("*") if p.is_file()]
    return LastWalk(at, tree_bytes(root), used, len(files), len(files) - 1)


def test_far_below_high_the_loop_estimates_instead_of_walking(
    roomy_tmp_path: Path, tier: TierDir
) -> None:
    """The last walk found the tier half full and the volume has not grown since: no walk,
    so blocks written behind the volume's back (here: inside the slack) are not seen."""
    make_tier(roomy_tmp_path, 50, oldest=time.time() - DAY)
    capacity = capacity_for(roomy_tmp_path, 0.5)
    last = walked_at(roomy_tmp_path, time.time())
    more = [write_block(block_path(roomy_tmp_path, 100 + i), time.time() - DAY) for i in range(50)]
    result = evict(tier, capacity, last=last)
    assert not result.walked and result.evicted_files == 0
    assert result.used_bytes == last.used_bytes, "estimated: no growth of the volume"
    assert all(p.exists() for p in more)
    # A walk as old as FULL_WALK_SECONDS: walk, and find the tier full.
    stale = walked_at(roomy_tmp_path, time.time() - FULL_WALK_SECONDS - 1)
    again = evict(tier, capacity, last=stale)
    assert again.walked and again.evicted_files > 0


def test_halfway_to_high_the_loop_walks(roomy_tmp_path: Path, tier: TierDir) -> None:
    """Halfway between low (70 %) and high (85 %) is 77.5 %: from there on, every pass walks."""
    root = roomy_tmp_path
    make_tier(root, 100, oldest=time.time() - DAY)
    result = evict(tier, capacity_for(root, 0.78), last=walked_at(root, time.time()))
    assert result.walked and result.evicted_files == 0
    below = evict(tier, capacity_for(root, 0.77), last=walked_at(root, time.time()))
    assert not below.walked


def test_the_volumes_growth_counts_as_the_tiers(
    roomy_tmp_path: Path, tier: TierDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last walk found the tier at half its capacity; the volume has grown by another
    half of it since: estimated full, so the pass walks (and evicts). The volume is read
    once: a writer elsewhere on this disk (a test beside this one deleting its files) would
    otherwise move the growth by more than the tier's size."""
    make_tier(roomy_tmp_path, 100, oldest=time.time() - DAY)
    capacity = capacity_for(roomy_tmp_path, 0.9)
    volume = volume_bound(os.statvfs(roomy_tmp_path))
    monkeypatch.setattr(run, "volume_bound", lambda _: volume)
    last = LastWalk(time.time(), capacity // 2, volume.used - capacity // 2, 0, 0)
    result = evict(tier, capacity, last=last)
    assert result.walked and result.evicted_files > 0


def test_lost_and_found_is_passed_over(roomy_tmp_path: Path, tier: TierDir) -> None:
    make_tier(roomy_tmp_path, 1, oldest=time.time() - DAY)
    (roomy_tmp_path / "lost+found").mkdir(mode=0o700)
    stray = write_block(roomy_tmp_path / "lost+found" / "#1234", time.time() - DAY)
    result = evict(tier, capacity=1)
    assert result.skipped_dirs == 0 and result.notes == []
    assert result.files == 3 and stray.exists()  # the block, config.json and the lock
