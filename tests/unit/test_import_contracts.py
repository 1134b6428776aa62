"""The layers and independence rules (pyproject.toml, [tool.importlinter]) hold: lint-imports
keeps every contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_keeps_every_contract() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    done = subprocess.run(
        [str(lint_imports), "--no-cache", "pyproject.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
