"""`kvtier evict` never deletes outside its directory and refuses directories it may not
touch; real symlinks, hard links and permissions on this machine's disk."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.evict import BadDirectory, EvictorLock, Options, open_tier_dir
from kvtier.evict.remove import Outcome, Remover
from kvtier.evict.run import run_pass
from kvtier.evict.scan import scan
from tests.unit.evict_tree import BASE, block_hash, in_namespace, make_tier

DAY = 86400.0


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the tier, a directory beside it) — both full of old vLLM block files."""
    inside, outside = tmp_path / "tier", tmp_path / "outside"
    make_tier(outside, 30, oldest=time.time() - 2 * DAY)
    inside.mkdir()
    yield inside, outside


def all_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def evict_everything(root: Path) -> None:
    tier = open_tier_dir(str(root))
    lock = EvictorLock(tier)
    try:
        run_pass(tier, lock, Options(capacity_bytes=1, protect_seconds=0))
    finally:
        lock.release()
        tier.close()


def test_symlinks_never_lead_the_evictor_outside(dirs: tuple[Path, Path]) -> None:
    inside, outside = dirs
    before = all_files(outside)
    make_tier(inside, 3, oldest=time.time() - DAY)
    rank = inside / f"{BASE}_r0"
    source = outside / f"{BASE}_r0"
    # A symlink at every level of vLLM's layout, each into the outside tree:
    (inside / f"{BASE}_r1").symlink_to(source)  # a rank directory
    prefix = next(p for p in source.iterdir())
    (rank / "fff").symlink_to(prefix)  # a hash-prefix directory
    group = next(prefix.iterdir())
    (rank / block_hash(0)[:3] / "ff_g0").symlink_to(group)  # a group directory
    target = next(group.iterdir())
    h = block_hash(0)
    (rank / h[:3] / f"{h[3:5]}_g0" / f"{h[:5]}{'f' * 59}.bin").symlink_to(target)  # a block
    (inside / "up").symlink_to("..")  # a loop back above the tier
    evict_everything(inside)
    assert all_files(outside) == before, "nothing outside the tier may be deleted"
    assert not any(p.suffix == ".bin" for p in all_files(inside)), "the tier's own blocks go"
    assert (inside / f"{BASE}_r1").is_symlink(), "symlinks are left alone, not removed"


def test_a_directory_swapped_for_a_symlink_after_the_scan(dirs: tuple[Path, Path]) -> None:
    """The race a path-based evictor loses: between scan and unlink, a directory of the
    tier becomes a symlink to a directory outside holding a file of the same name."""
    inside, outside = dirs
    (path,) = make_tier(inside, 1, oldest=time.time() - DAY)
    tier = open_tier_dir(str(inside))
    try:
        found = scan(tier, time.time(), 0).candidates
        decoy = outside / "decoy"
        path.parent.rename(decoy)
        path.parent.symlink_to(decoy)
        outcome, freed = Remover(tier, 0).remove(found.path(0), found.used_at[0], found.inodes[0])
    finally:
        tier.close()
    assert outcome is Outcome.FAILED and freed == 0  # ELOOP: O_NOFOLLOW refused the symlink
    assert (decoy / path.name).exists()


def test_a_block_replaced_after_the_scan_is_kept(tmp_path: Path) -> None:
    """vLLM rewrites a block by renaming a new file over it: a new inode, kept."""
    (path,) = make_tier(tmp_path, 1, oldest=time.time() - DAY)
    tier = open_tier_dir(str(tmp_path))
    try:
        found = scan(tier, time.time(), 0).candidates
        fresh = path.with_name(path.name + "_1.tmp")
        fresh.write_bytes(b"new")
        os.utime(fresh, (time.time() - DAY, time.time() - DAY))  # even with an old time
        fresh.replace(path)
        outcome, _ = Remover(tier, 0).remove(found.path(0), found.used_at[0], found.inodes[0])
        assert outcome is Outcome.REFUSED
        found = scan(tier, time.time(), 0).candidates
        os.utime(path, (time.time(), path.stat().st_mtime))  # read since the scan: in use
        outcome, _ = Remover(tier, 0).remove(found.path(0), found.used_at[0], found.inodes[0])
        assert outcome is Outcome.IN_USE
    finally:
        tier.close()
    assert path.exists()


def test_a_file_that_vanished_is_normal(tmp_path: Path) -> None:
    (path,) = make_tier(tmp_path, 1, oldest=time.time() - DAY)
    tier = open_tier_dir(str(tmp_path))
    try:
        found = scan(tier, time.time(), 0).candidates
        path.unlink()
        outcome, _ = Remover(tier, 0).remove(found.path(0), found.used_at[0], found.inodes[0])
        assert outcome is Outcome.VANISHED
        path.parent.rmdir()
        outcome, _ = Remover(tier, 0).remove(found.path(0), found.used_at[0], found.inodes[0])
        assert outcome is Outcome.VANISHED
    finally:
        tier.close()


def test_a_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    tier_path = tmp_path / "tier"
    tier_path.mkdir()
    (tier_path / ".kvtier-evict.lock").symlink_to(victim)
    tier = open_tier_dir(str(tier_path))
    try:
        with pytest.raises(Exception, match="lock file: a symlink"):
            EvictorLock(tier).acquire()
    finally:
        tier.close()
    assert victim.read_text() == "keep"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing", "does not exist"),
        ("file", "is not a directory"),
        ("link-to-file", "is not a directory"),
    ],
)
def test_bad_directories(tmp_path: Path, name: str, message: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "link-to-file").symlink_to(tmp_path / "file")
    with pytest.raises(BadDirectory, match=message):
        open_tier_dir(str(tmp_path / name))


def test_the_root_directory_is_refused() -> None:
    with pytest.raises(BadDirectory, match="refusing the root directory /"):
        open_tier_dir("/")
    with pytest.raises(BadDirectory, match="refusing the root directory"):
        open_tier_dir("/tmp/../")


def test_outside_the_allowed_roots_is_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "mnt"
    (allowed / "kv").mkdir(parents=True)
    (tmp_path / "mntx").mkdir()
    assert open_tier_dir(str(allowed / "kv"), [str(allowed)]).path == str(allowed / "kv")
    with pytest.raises(BadDirectory, match="outside the allowed roots"):
        open_tier_dir(str(tmp_path / "mntx"), [str(allowed)])  # a prefix, not a parent
    (allowed / "escape").symlink_to(tmp_path / "mntx")
    with pytest.raises(BadDirectory, match="outside the allowed roots"):
        open_tier_dir(str(allowed / "escape"), [str(allowed)])  # resolved before the check


def test_cli_refuses_a_directory_it_cannot_write(tmp_path: Path) -> None:
    """A read-only directory (a read-only bind mount in a user and mount namespace of its
    own: root may write anything else): exit 2, one line naming the directory and the rule,
    no traceback."""
    target = tmp_path / "tier"
    target.mkdir()
    run = in_namespace(
        f"mount --bind {target} {target} && mount -o remount,ro,bind {target} && "
        f"exec {sys.executable} -m kvtier evict --dir {target} --once"
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"kvtier: error: evict: --dir {target}: not writable by uid")
    assert len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
