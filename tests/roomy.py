"""A temporary directory on a volume with room, for the `kvtier evict` tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SHM = Path("/dev/shm")


def _usage(path: Path) -> float:
    vfs = os.statvfs(path)
    used = vfs.f_blocks - vfs.f_bfree
    return used / max(1, used + vfs.f_bavail)


@pytest.fixture
def roomy_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory on a volume at most half full. `kvtier evict` acts on the fuller
    of its tier's capacity and its volume: where a test means the capacity to decide, a
    machine disk past the evictor's watermarks (seen at 91 % while a cold build's caches
    filled it) would decide instead. Then the directory is on /dev/shm (tmpfs), or the test
    fails saying why."""
    if _usage(tmp_path) <= 0.5:
        yield tmp_path
        return
    if not SHM.is_dir() or _usage(SHM) > 0.5:
        pytest.fail(f"no volume at most half full for an evictor test: {tmp_path}'s is fuller")
    roomy = Path(tempfile.mkdtemp(prefix="kvtier-evict-", dir=SHM))
    try:
        yield roomy
    finally:
        shutil.rmtree(roomy, ignore_errors=True)
