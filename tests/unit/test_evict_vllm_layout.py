"""kvtier evict's idea of vLLM's fs tier layout, against files vLLM's own code wrote.

tests/fixtures/vllm-fs/<version>.json lists the files vLLM's FileMapper and block writer put
under a tier's root_dir (two ranks, a second KV-cache group, a parallelism-agnostic mapper;
xxhash block hashes too where the virtualenv has xxhash) and the name of a temporary file
its writer uses. Regenerate
them with the virtualenvs of `make conformance`:

    python -m tests.unit.test_evict_vllm_layout --write

The tests need no vLLM: they lay the same files out and check which ones `kvtier evict`
takes for block files, and that it deletes exactly those.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kvtier.evict import EvictorLock, Options, open_tier_dir
from kvtier.evict.run import run_pass

FIXTURES = Path(__file__).parents[1] / "fixtures"
LAYOUTS = sorted((FIXTURES / "vllm-fs").glob("*.json"))
CONFORMANCE = sorted(p.stem for p in (FIXTURES / "vllm").glob("*.json"))
VENVS = Path(os.environ.get("KVTIER_CACHE_DIR", Path.home() / ".cache" / "kvtier")) / "venvs"

# Run by a vLLM virtualenv's python: writes real blocks with vLLM's own code, and a listing
# of them to argv[1].
GENERATOR = r"""
import inspect, json, mmap, os, sys, tempfile
import vllm
from vllm.utils.hashing import sha256_cbor, xxhash_cbor
from vllm.v1.core.kv_cache_utils import hash_block_tokens, init_none_hash
from vllm.v1.kv_offload.base import make_offload_key
from vllm.v1.kv_offload.file_mapper import FileMapper
from vllm.v1.kv_offload.tiering.fs import io

root = tempfile.mkdtemp()
params = inspect.signature(FileMapper).parameters
per_hash = "tokens_per_hash" if "tokens_per_hash" in params else "hash_block_size"
per_file = "blocks_per_file" if "blocks_per_file" in params else "gpu_blocks_per_file"
store = getattr(io, "_store_block", None) or io.store_block
buffer = memoryview(mmap.mmap(-1, 4096))  # page-aligned, for O_DIRECT
blocks = []
for hash_fn in (sha256_cbor, xxhash_cbor):
    try:
        init_none_hash(hash_fn)
        block_hash = hash_block_tokens(hash_fn, None, list(range(16)))
    except ModuleNotFoundError:  # xxhash not installed
        continue
    for rank, agnostic, group in ((0, False, 0), (1, False, 2), (1, True, 0)):
        mapper = FileMapper(
            root_dir=root, model_name="meta-llama/Llama-3.1-70B-Instruct", tp_size=2,
            pp_size=1, pcp_size=1, dcp_size=1, rank=rank, dtype="bfloat16",
            parallel_agnostic=agnostic, **{per_hash: 16, per_file: 1},
        )
        config = mapper.get_config_file_path()
        os.makedirs(os.path.dirname(config), exist_ok=True)
        with open(config, "w") as f:
            json.dump(mapper.get_run_config(), f)
        path = mapper.get_file_name(make_offload_key(bytes(block_hash), group))
        store(path, buffer, 0, 4096)
        blocks.append(os.path.relpath(path, root))
files = sorted(
    os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names
)
temporary = blocks[0] + io._get_tmp_suffix()
with open(sys.argv[1], "w") as out:  # not stdout: vLLM logs there
    json.dump({"vllm": vllm.__version__, "files": files, "blocks": sorted(set(blocks)),
               "temporary": temporary}, out, indent=1)
    out.write("\n")
"""


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


def write() -> None:
    for version in CONFORMANCE:
        python = VENVS / f"vllm-{version}" / "bin" / "python"
        out = FIXTURES / "vllm-fs" / f"{version}.json"
        # A fixed seed: the block hashes chain from a seeded NONE_HASH.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run([str(python), "-c", GENERATOR, str(out)], env=env, check=True)
        print(f"vllm {version}: {len(_layout(out)['files'])} files")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.unit.test_evict_vllm_layout --write")
    write()
