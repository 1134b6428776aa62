"""The end-of-run summary of the slowest modules (tests/module_times.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from tests.module_times import ModuleTimes


def report(
    nodeid: str, when: Literal["setup", "call", "teardown"], duration: float
) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("f", 1, "t"), {}, "passed", None, when, [], duration)


def test_modules_are_ranked_by_all_phases_of_their_tests(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVTIER_PHASE_LOG", raising=False)  # not the run's own log
    times = ModuleTimes()
    phases: list[tuple[str, Literal["setup", "call", "teardown"], float]] = [
        ("tests/e2e/test_slow.py::test_a", "setup", 40.0),  # a cluster starting
        ("tests/e2e/test_slow.py::test_a", "call", 5.0),
        ("tests/e2e/test_slow.py::test_b", "call", 5.0),
        ("tests/unit/test_fast.py::test_c", "call", 0.5),
        ("tests/unit/test_fast.py::test_c", "teardown", 0.5),
    ]
    for nodeid, when, duration in phases:
        times.pytest_runtest_logreport(report(nodeid, when, duration))
    out = io.StringIO()
    terminal = pytest.TerminalReporter(pytestconfig, out)
    times.pytest_terminal_summary(terminal)
    lines = [line for line in out.getvalue().splitlines() if " s " in line]
    assert lines[0].split() == ["50.0", "s", "98.0", "%", "2", "tests", "tests/e2e/test_slow.py"]
    assert lines[1].split()[:2] == ["1.0", "s"] and lines[1].endswith("tests/unit/test_fast.py")
    assert lines[2].split() == ["51.0", "s", "in", "all"]


def test_each_modules_time_goes_to_the_phase_log(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "phases.jsonl"
    monkeypatch.setenv("KVTIER_PHASE_LOG", str(log))
    times = ModuleTimes()
    times.pytest_runtest_logreport(report("tests/e2e/test_x.py::test_a", "call", 2.0))
    times.pytest_runtest_logreport(report("tests/e2e/test_y.py::test_b", "setup", 3.0))
    times.pytest_terminal_summary(pytest.TerminalReporter(pytestconfig, io.StringIO()))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [
        {"phase": "pytest tests/e2e/test_x.py", "wall": 2.0, "tests": 1},
        {"phase": "pytest tests/e2e/test_y.py", "wall": 3.0, "tests": 0},
    ]


def test_side_by_side_each_module_is_logged_once(tmp_path: Path) -> None:
    """On pytest-xdist workers (as `make test` runs) the controller logs each module once:
    the workers' own summaries would log them a second time."""
    log = tmp_path / "phases.jsonl"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KVTIER_PHASE_LOG": str(log)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "1",
            "tests/unit/test_plan_cache.py",
        ],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    phases = [json.loads(line)["phase"] for line in log.read_text().splitlines()]
    assert phases == ["pytest tests/unit/test_plan_cache.py"]
