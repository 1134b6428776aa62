"""Record the files vLLM's own fs tier code writes, in tests/fixtures/vllm-fs/<version>.json.

Runs INSIDE a vLLM virtualenv made by hack/conformance/run (never in the repo's .venv). It
writes real blocks under a temporary root_dir with vLLM's FileMapper and block writer (two
ranks, a second KV-cache group, a parallelism-agnostic mapper; xxhash block hashes too where
the virtualenv has xxhash) and lists the files, the block files among them and the name of a
temporary file the writer uses. Block hashes and the temporary suffix are seeded, so a rerun
writes the same file. tests/unit/test_evict_vllm_layout.py lays the same files out
without vLLM and checks that `kvtier evict` deletes exactly the block files. Its provenance
names the vLLM wheel and hashes this script's sources and the file's body (golden_provenance.py).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import mmap
import os
import pathlib
import platform
import random
import sys
import tempfile
from typing import Any

# vLLM seeds the hash chain's first block (NONE_HASH) from PYTHONHASHSEED, else from
# os.urandom: a fixed seed keeps the block file names the same from run to run.
os.environ["PYTHONHASHSEED"] = "0"

import golden_provenance  # this directory: the script's own
import vllm
from vllm.utils.hashing import sha256_cbor, xxhash_cbor
from vllm.v1.core.kv_cache_utils import hash_block_tokens, init_none_hash
from vllm.v1.kv_offload.base import make_offload_key
from vllm.v1.kv_offload.file_mapper import FileMapper
from vllm.v1.kv_offload.tiering.fs import io

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def layout(root: str) -> dict[str, Any]:
    """Write blocks under `root` with vLLM's own code; list what is there."""
    # The writer's temporary files get a random.randint suffix: seeded, so that their name too
    # is the same from run to run (the first draw; nothing here draws before the writer).
    random.seed(0)
    params = inspect.signature(FileMapper).parameters
    # The keyword names differ between releases.
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
                root_dir=root,
                model_name=MODEL,
                tp_size=2,
                pp_size=1,
                pcp_size=1,
                dcp_size=1,
                rank=rank,
                dtype="bfloat16",
                parallel_agnostic=agnostic,
                **{per_hash: 16, per_file: 1},
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
    return {
        "vllm": vllm.__version__,
        "files": files,
        "blocks": sorted(set(blocks)),
        "temporary": blocks[0] + io._get_tmp_suffix(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--expect-version", help="fail unless this vLLM release is imported")
    parser.add_argument(
        "--install-report", required=True, help="pip's install report of this virtualenv"
    )
    args = parser.parse_args()
    if args.expect_version and vllm.__version__ != args.expect_version:
        print(f"vLLM {vllm.__version__} imported, {args.expect_version} expected", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kvtier-fs-layout-") as root:
        body = layout(root)
    document = {
        "provenance": {
            "vllm": vllm.__version__,
            "python": platform.python_version(),
            "source": "vllm.v1.kv_offload.file_mapper.FileMapper and the fs tier's block writer "
            "(vllm.v1.kv_offload.tiering.fs.io), PYTHONHASHSEED=0",
            "command": "hack/conformance/run (hack/conformance/fs_layout.py)",
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        **body,
    }
    golden_provenance.seal(document, REPO, "vllm-fs", pathlib.Path(args.install_report))
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
