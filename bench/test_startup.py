"""bench/startup.py runs and prints one ratio line per command (a smoke test, not a timing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "startup.py"


def test_startup_script_prints_ratios() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--max-ratio", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    ratios = re.findall(r"^ratio (kvtier [^:]+): ([0-9.]+)x python -c pass", run.stdout, re.M)
    assert [name for name, _ in ratios] == ["kvtier --help", "kvtier plan -o json"]
    assert all(float(x) > 0 for _, x in ratios)
