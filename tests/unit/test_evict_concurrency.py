"""`kvtier evict` beside writers, and several evictors on one directory (one acts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kvtier.evict import EvictorLock, Options, open_tier_dir
from kvtier.evict.run import run_pass
from tests.unit.evict_tree import BLOCK_BYTES, block_path, make_tier, write_block

DAY = 86400.0


def test_a_pass_beside_a_writer(tmp_path: Path) -> None:
    """A thread writes new blocks the way vLLM does (a temporary file renamed into place)
    and deletes old ones while a pass runs: the pass finishes, new blocks are all kept, and
    each old block is either evicted, vanished (the writer's) or still there."""
    old = make_tier(tmp_path, 3000, oldest=time.time() - DAY)
    stop = threading.Event()
    written: list[Path] = []
    removed: set[Path] = set()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            path = block_path(tmp_path, 10_000 + i)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}_{i}.tmp")
            tmp.write_bytes(b"\0" * BLOCK_BYTES)
            tmp.replace(path)
            written.append(path)
            victim = old[(i * 7) % len(old)]
            if victim.exists():
                victim.unlink(missing_ok=True)
                removed.add(victim)
            i += 1

    thread = threading.Thread(target=writer)
    tier = open_tier_dir(str(tmp_path))
    lock = EvictorLock(tier)
    thread.start()
    try:
        while len(written) < 20:
            time.sleep(0.001)
        at_start = len(written)
        result = run_pass(tier, lock, Options(capacity_bytes=1, protect_seconds=60))
        during = len(written) - at_start
    finally:
        stop.set()
        thread.join()
        lock.release()
        tier.close()
    assert during > 0 and removed, "the writer ran during the pass"
    assert all(p.exists() for p in written), "fresh blocks are protected"
    assert not any(p.exists() for p in old), "every old block is gone, by one or the other"
    # Each old block went once: evicted, or removed by the writer (whose exists-then-unlink
    # may count one the evictor took in between).
    assert result.evicted_files > 0
    assert result.evicted_files + len(removed) >= len(old)
    assert result.failed_files == 0 and result.refused_files == 0


def test_two_locks_on_one_directory(tmp_path: Path) -> None:
    tier = open_tier_dir(str(tmp_path))
    first, second = EvictorLock(tier, "first"), EvictorLock(tier, "second")
    try:
        assert first.acquire()
        assert not second.acquire()
        assert second.holder() == "first"
        result = run_pass(tier, second, Options(capacity_bytes=1))
        assert not result.acted and result.holder == "first"
        first.release()
        assert second.acquire(), "the standby takes over once the holder lets go"
    finally:
        first.release()
        second.release()
        tier.close()


def test_a_deleted_lock_file_is_noticed(tmp_path: Path) -> None:
    """Someone removes the lock file: a second evictor could lock a new one, so the holder
    stands down and takes the new file's lock (or stands by)."""
    tier = open_tier_dir(str(tmp_path))
    lock = EvictorLock(tier, "first")
    try:
        assert lock.acquire()
        (tmp_path / ".kvtier-evict.lock").unlink()
        other = EvictorLock(tier, "second")
        assert other.acquire()
        assert not lock.acquire(), "the name leads to the other's lock now"
        other.release()
    finally:
        lock.release()
        tier.close()


def start_evictor(tier: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "kvtier", "evict", "--dir", str(tier), "--interval", "0.1"),
            *("--capacity", "1", "--protect-seconds", "0", "-o", "json"),
        ],
        stdout=subprocess.PIPE,
        # A file, not a pipe nobody reads: a log line each pass filled a pipe on a busy run,
        # and the blocked process could not end on SIGTERM.
        stderr=tempfile.TemporaryFile("w+"),
        text=True,
    )


def read_pass(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "no output"
    result: dict[str, object] = json.loads(line)
    return result


def test_two_evictor_processes_one_acts_the_other_takes_over(tmp_path: Path) -> None:
    make_tier(tmp_path, 10, oldest=time.time() - DAY)
    first = start_evictor(tmp_path)
    try:
        assert read_pass(first)["acted"] is True
        second = start_evictor(tmp_path)
        try:
            for _ in range(3):
                standby = read_pass(second)
                assert standby["acted"] is False
                assert f"pid {first.pid}" in str(standby["holder"])
            write_block(block_path(tmp_path, 99), time.time() - DAY)
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=30) == 0, "SIGTERM ends the loop cleanly"
            while (took := read_pass(second))["acted"] is False:
                pass
            assert took["acted"] is True
            assert not block_path(tmp_path, 99).exists()
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
