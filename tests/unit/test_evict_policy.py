"""The parts of `kvtier evict` that decide: watermarks, protection, LRU order, vLLM's names,
and the compact list of candidates rebuilding the paths it scanned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvtier.evict import layout, open_tier_dir
from kvtier.evict.policy import (
    Bound,
    Watermarks,
    batch_end,
    bytes_to_free,
    is_protected,
    last_use,
    lru_order,
    walk_needed,
)
from kvtier.evict.scan import scan
from tests.unit.evict_tree import BASE, block_path, make_tier, write_block

GiB = 1 << 30


@pytest.mark.parametrize(
    ("high", "low", "message"),
    [
        (0.7, 0.85, "--low: must be below --high"),
        (0.8, 0.8, "--low: must be below --high"),
        (1.5, 0.7, "--high: must be a fraction in (0, 1]"),
        (0.85, 0.0, "--low: must be a fraction in (0, 1]"),
        (float("nan"), 0.7, "--high: must be a fraction"),
    ],
)
def test_bad_watermarks_name_the_flag(high: float, low: float, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        Watermarks(high=high, low=low)


def test_nothing_to_free_below_the_high_watermark() -> None:
    marks = Watermarks()
    assert bytes_to_free([Bound("volume", used=84 * GiB, size=100 * GiB)], marks) == 0


def test_at_the_high_watermark_free_down_to_the_low_one() -> None:
    marks = Watermarks()
    assert bytes_to_free([Bound("volume", used=85 * GiB, size=100 * GiB)], marks) == 15 * GiB


def test_the_fuller_bound_decides_and_both_end_below_low() -> None:
    """The volume (statvfs) is 50 % used, but the tier's capacity is 90 % used: free 20 GiB,
    which leaves the capacity at 70 % and the volume lower still."""
    marks = Watermarks(high=0.85, low=0.70)
    bounds = [
        Bound("volume", used=100 * GiB, size=200 * GiB),
        Bound("capacity", used=90 * GiB, size=100 * GiB),
    ]
    assert bytes_to_free(bounds, marks) == 20 * GiB
    # Once a bound crossed high, every bound is brought to low: the volume needs 60 GiB more.
    bounds[0] = Bound("volume", used=200 * GiB, size=200 * GiB)
    assert bytes_to_free(bounds, marks) == 200 * GiB - 140 * GiB


def test_a_walk_is_needed_from_halfway_between_the_watermarks() -> None:
    marks = Watermarks(high=0.85, low=0.70)
    assert not walk_needed([Bound("capacity", used=77, size=100)], marks)
    assert walk_needed([Bound("capacity", used=78, size=100)], marks)
    assert walk_needed([Bound("volume", used=10, size=100), Bound("c", 80, 100)], marks)


def test_a_zero_sized_bound_counts_as_full() -> None:
    assert Bound("volume", used=0, size=0).ratio == 1.0


def test_last_use_is_the_later_of_atime_and_mtime() -> None:
    assert last_use(atime=10.0, mtime=20.0) == 20.0  # noatime: a write is the last use known
    assert last_use(atime=30.0, mtime=20.0) == 30.0


def test_protection_age() -> None:
    assert is_protected(used_at=1000.0, now=1100.0, protect_seconds=300)
    assert not is_protected(used_at=700.0, now=1100.0, protect_seconds=300)
    assert not is_protected(used_at=1100.0, now=1100.0, protect_seconds=0)


def test_lru_order_oldest_first_ties_in_scan_order() -> None:
    assert lru_order([5.0, 1.0, 3.0, 1.0]) == [1, 3, 2, 0]


def test_batch_end_covers_the_need_with_the_fewest_files() -> None:
    order = [2, 0, 1]
    sizes = [10, 20, 30]
    assert batch_end(order, 0, sizes, 30) == 1  # file 2 alone (30 B)
    assert batch_end(order, 0, sizes, 31) == 2
    assert batch_end(order, 1, sizes, 100) == 3  # not enough: all of the rest
    assert batch_end(order, 0, sizes, 0) == 0


def test_vllm_names() -> None:
    h = "3fa9c" + "0" * 59
    assert layout.is_rank_dir("meta-llama_Llama-3.1-70B_0123456789ab_r7")
    assert not layout.is_rank_dir("meta-llama_Llama-3.1-70B_0123456789ab")  # config.json's
    assert not layout.is_rank_dir("data_r0")
    assert layout.is_prefix_dir("3fa") and not layout.is_prefix_dir("3fa9")
    assert layout.group_dir("9c_g0") == ("9c", 0)
    assert layout.group_dir("9c_g12") == ("9c", 12)
    assert layout.group_dir("9c_g012") is None  # would not rebuild as the same name
    assert layout.group_dir("9c_g999999999") == ("9c", 999999999)
    assert layout.group_dir("9c_g9999999999") is None  # no group index has ten digits
    assert layout.group_dir("9c") is None
    assert layout.block_kind(f"{h}.bin", "3fa9c") == layout.BLOCK
    assert layout.block_kind(f"{h}.bin_8812093471.tmp", "3fa9c") == layout.TEMPORARY
    assert layout.block_kind(f"{h}.bin", "3fa9d") == layout.NOT_A_BLOCK  # another's directory
    assert layout.block_kind("config.json", "") == layout.NOT_A_BLOCK
    assert layout.block_kind(f"{h}.bin.bak", "3fa9c") == layout.NOT_A_BLOCK
    assert layout.block_dirs(h, 3) == "3fa/9c_g3"


def test_candidate_paths_rebuild_as_scanned(tmp_path: Path) -> None:
    """A block's path is kept as (rank, hash, group) and rebuilt: it must be the same text
    the scan found, for every kind of name (a temporary file keeps its path as text)."""
    now = time.time()
    paths = make_tier(tmp_path, 50, oldest=now - 86400)
    paths.append(write_block(block_path(tmp_path, 60, rank=3, group=17), now - 86400))
    short = "abcde" + "1" * 27  # xxhash-sized: 16 bytes
    paths.append(write_block(tmp_path / f"{BASE}_r0/abc/de_g0/{short}.bin", now - 86400))
    odd = "abcde" + "1" * 26  # an odd number of digits cannot be packed
    paths.append(write_block(tmp_path / f"{BASE}_r0/abc/de_g0/{odd}.bin", now - 86400))
    paths.append(write_block(Path(f"{block_path(tmp_path, 61)}_42.tmp"), now - 86400))
    tier = open_tier_dir(str(tmp_path))
    try:
        found = scan(tier, now, 0).candidates
    finally:
        tier.close()
    rebuilt = {found.path(i) for i in range(len(found))}
    assert rebuilt == {str(p.relative_to(tmp_path)) for p in paths}
    assert len(found.paths) == 2, "only the odd hash and the temporary file are kept as text"
