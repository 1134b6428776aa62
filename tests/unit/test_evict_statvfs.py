"""The volume's own statistics: the watermarks bite on a real, small file system.

A tmpfs of a few MiB, mounted in a user and mount namespace of the test's own (`unshare
-rm`), is filled past the high watermark with vLLM block files; `kvtier evict --once`, with
no --capacity, must bring what the file system itself reports (statvfs, as df) below the low
watermark.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from kvtier.evict.run import volume_bound
from tests.unit.evict_tree import in_namespace

MiB = 1 << 20

FILL = """
import sys, time
from pathlib import Path
from tests.unit.evict_tree import block_path, make_tier, write_block
root, n = Path(sys.argv[1]), int(sys.argv[2])
make_tier(root, 0, oldest=0)
for i in range(n):
    write_block(block_path(root, i), time.time() - 86400 + i, size=64 * 1024)
"""

USAGE = """
import os, sys
from kvtier.evict.run import volume_bound
print(volume_bound(os.statvfs(sys.argv[1])).ratio)
"""


def python(code: str, *args: object) -> str:
    quoted = code.replace("'", "'\\''")
    return f"{sys.executable} -c '{quoted}' {' '.join(str(a) for a in args)}"


def test_the_volume_bound_is_what_df_shows(tmp_path: Path) -> None:
    """used and size (used + available to users) from statvfs, the figures of `df`."""
    bound = volume_bound(os.statvfs(tmp_path))
    usage = shutil.disk_usage(tmp_path)
    assert abs(bound.used - usage.used) < 64 * MiB  # other writers on this machine
    assert abs(bound.size - (usage.used + usage.free)) < 64 * MiB
    assert bound.size <= usage.total  # blocks reserved for root do not count


def test_a_full_volume_is_brought_below_the_low_watermark(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    tier.mkdir()
    run = in_namespace(
        f"mount -t tmpfs -o size=8m tmpfs {tier} && "
        f"{python(FILL, tier, 112)} && "  # 7 MiB of 8: 87.5 %
        f"{python(USAGE, tier)} && "
        f"{sys.executable} -m kvtier evict --dir {tier} --once -o json && "
        f"{python(USAGE, tier)}"
    )
    assert run.returncode == 0, run.stderr
    before, summary, after = run.stdout.splitlines()
    result = json.loads(summary)
    assert float(before) >= 0.85
    assert abs(result["usageRatio"] - float(before)) < 0.01  # + the lock file's page
    assert result["bytesToFree"] > 0
    assert result["evictedFiles"] > 0
    assert float(after) <= 0.70, "what the file system reports, after the pass"
    assert float(after) > 0.60, "and not far below: only what the low watermark asks"


def test_a_file_system_mounted_inside_the_tier_is_not_entered(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    tier.mkdir()
    rank1 = "meta-llama_Llama-3.1-8B_0123456789ab_r1"
    run = in_namespace(
        f"{python(FILL, tier, 3)} && mkdir {tier}/{rank1} && "
        f"mount -t tmpfs -o size=1m tmpfs {tier}/{rank1} && "
        f"mkdir -p {tier}/{rank1}/abc/de_g0 && touch -d 2000-01-01 "
        f"{tier}/{rank1}/abc/de_g0/abcde00.bin && "
        f"{sys.executable} -m kvtier evict --dir {tier} --once --capacity 1 -o json && "
        f"ls {tier}/{rank1}/abc/de_g0"
    )
    assert run.returncode == 0, run.stderr
    summary, listing = run.stdout.splitlines()
    result = json.loads(summary)
    assert result["evictedFiles"] == 3
    assert result["skippedDirs"] == 1
    assert result["notes"] == [f"{rank1}: another file system is mounted there"]
    assert listing == "abcde00.bin"
