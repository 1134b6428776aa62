"""Build vLLM fs-tier trees on the real disk for the `kvtier evict` tests."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE = "meta-llama_Llama-3.1-8B_0123456789ab"  # <model>_<12-hex digest>, as vLLM names it
BLOCK_BYTES = 4096


def block_hash(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def block_path(root: Path, i: int, rank: int = 0, group: int = 0) -> Path:
    h = block_hash(i)
    return root / f"{BASE}_r{rank}" / h[:3] / f"{h[3:5]}_g{group}" / f"{h}.bin"


def write_block(path: Path, used_at: float, size: int = BLOCK_BYTES) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    os.utime(path, (used_at, used_at))
    return path


def make_tier(root: Path, n: int, oldest: float, step: float = 1.0) -> list[Path]:
    """n block files; block i was last used at oldest + i*step (block 0 is the LRU one)."""
    (root / BASE).mkdir(parents=True, exist_ok=True)
    (root / BASE / "config.json").write_text("{}\n")
    return [write_block(block_path(root, i), oldest + i * step) for i in range(n)]


def in_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run a shell script as root of a new user and mount namespace (`unshare -rm`), where
    it may mount a small tmpfs or a read-only bind mount without touching the machine's."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux's unshare is needed to mount a file system for the test")
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the scripts import tests.unit
        check=False,
        timeout=120,
    )
