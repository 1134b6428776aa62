"""bench/simulate.py runs and prints its ratio line (a smoke test, not a timing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "simulate.py"


def test_simulate_bench_prints_the_ratio() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--minutes", "1", "--max-seconds", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert re.search(r"^tiers off: [0-9.]+ s \([0-9]+ requests\)$", run.stdout, re.M)
    ratio = re.search(r"^ratio cpu: ([0-9.]+)x tiers off$", run.stdout, re.M)
    assert ratio and float(ratio.group(1)) > 0
