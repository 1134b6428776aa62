"""bench/evict.py builds a small tree, runs both passes and prints its ratio lines (a smoke
test of the script, not a timing: the full-size run's figures are in docs/performance.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "evict.py"


def test_evict_script_prints_ratios(roomy_tmp_path: Path) -> None:
    run = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--files", "5000", "--dir", str(roomy_tmp_path)),
            *("--max-time-ratio", "0", "--max-rss-mib", "0"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    ratios = dict(re.findall(r"^ratio ([^:]+): ([0-9.]+)x find", run.stdout, re.M))
    assert list(ratios) == ["eviction pass time", "eviction pass peak RSS", "steady pass time"]
    assert all(float(x) > 0 for x in ratios.values())
    deleted = re.search(r"deleted ([0-9,]+) files, 86\.0% -> ([0-9.]+)%", run.stdout)
    assert deleted, run.stdout
    assert int(deleted[1].replace(",", "")) > 0 and float(deleted[2]) <= 70.0
    assert "deleted 0)" in run.stdout, "the steady pass has nothing to delete"
    assert re.search(r"^interval: at the default --interval 60 s", run.stdout, re.M)
    assert list(roomy_tmp_path.iterdir()) == [], "the tree is removed afterwards"
