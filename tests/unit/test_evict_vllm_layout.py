"""kvtier evict's idea of vLLM's fs tier layout, against files vLLM's own code wrote.

tests/fixtures/vllm-fs/<version>.json lists the files vLLM's FileMapper and block writer put
under a tier's root_dir (two ranks, a second KV-cache group, a parallelism-agnostic mapper;
xxhash block hashes too where the virtualenv has xxhash) and the name of a temporary file
its writer uses. `make conformance` writes them (hack/conformance/fs_layout.py, in each
release's vLLM virtualenv); test_golden_provenance.py checks they are what it wrote.

The tests need no vLLM: they lay the same files out and check which ones `kvtier evict`
takes for block files, and that it deletes exactly those.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from kvtier.evict import EvictorLock, Options, open_tier_dir
from kvtier.evict.run import run_pass

FIXTURES = Path(__file__).parents[1] / "fixtures"
LAYOUTS = sorted((FIXTURES / "vllm-fs").glob("*.json"))
CONFORMANCE = sorted(p.stem for p in (FIXTURES / "vllm").glob("*.json"))


def _layout(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def test_every_conformance_release_has_a_layout() -> None:
    """A vLLM release pinned for conformance must have its fs layout recorded too."""
    assert CONFORMANCE, "no conformance golden files"
    assert [p.stem for p in LAYOUTS] == CONFORMANCE


@pytest.mark.parametrize("path", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_vllms_own_files_are_what_kvtier_deletes(path: Path, tmp_path: Path) -> None:
    layout = _layout(path)
    assert layout["vllm"] == path.stem
    assert len(layout["blocks"]) >= 3 and any(b.endswith(".bin") for b in layout["files"])
    old = time.time() - 86400
    for rel in [*layout["files"], layout["temporary"]]:
        file = tmp_path / rel
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(b"\0" * 4096)
        os.utime(file, (old, old))
    tier = open_tier_dir(str(tmp_path))
    lock = EvictorLock(tier)
    try:
        result = run_pass(tier, lock, Options(capacity_bytes=1, protect_seconds=0))
    finally:
        lock.release()
        tier.close()
    assert result.block_files == len(layout["blocks"]) + 1  # and the temporary file
    assert result.evicted_files == result.block_files
    left = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    kept = set(layout["files"]) - set(layout["blocks"])
    assert kept and all(k.endswith("config.json") for k in kept)
    assert left == kept | {".kvtier-evict.lock"}, "vLLM's config files stay, every block goes"
