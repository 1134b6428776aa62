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

from tests.module_times import CPU_KEY, ModuleTimes


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
    assert lines[0].split() == [
        *("50.0", "s", "98.0", "%", "0.0", "s", "CPU", "2", "tests", "tests/e2e/test_slow.py")
    ]
    assert lines[1].split()[:2] == ["1.0", "s"] and lines[1].endswith("tests/unit/test_fast.py")
    assert lines[2].split() == ["51.0", "s", "in", "all,", "0.0", "s", "CPU"]


def test_each_modules_time_goes_to_the_phase_log(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "phases.jsonl"
    monkeypatch.setenv("KVTIER_PHASE_LOG", str(log))
    times = ModuleTimes()
    times.pytest_runtest_logreport(report("tests/e2e/test_x.py::test_a", "call", 2.0))
    last = report("tests/e2e/test_y.py::test_b", "teardown", 3.0)
    last.user_properties.append([CPU_KEY, 1.25])  # type: ignore[arg-type]  # as from xdist
    times.pytest_runtest_logreport(last)
    times.pytest_terminal_summary(pytest.TerminalReporter(pytestconfig, io.StringIO()))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [
        {"phase": "pytest tests/e2e/test_x.py", "wall": 2.0, "cpu": 0.0, "tests": 1},
        {"phase": "pytest tests/e2e/test_y.py", "wall": 3.0, "cpu": 1.2, "tests": 0},
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


# A module that starts a process (as a session fixture starts a control plane) which burns
# BURN CPU-seconds and then idles until the session ends; a later module that only waits.
_CONFTEST = """
import subprocess, sys, pytest
from tests import module_times

def pytest_configure(config):
    module_times.register(config)

@pytest.fixture(scope="session")
def server(tmp_path_factory):
    done = tmp_path_factory.mktemp("server") / "burnt"
    code = (
        "import time, pathlib, sys\\n"
        "while time.process_time() < float(sys.argv[2]): pass\\n"
        "pathlib.Path(sys.argv[1]).touch()\\n"
        "time.sleep(600)\\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(done), "BURN"])
    yield done
    proc.kill()
    proc.wait()
"""
_BUSY = """
import subprocess, sys, time

def test_a_server_burns(server):
    while not server.exists():
        time.sleep(0.05)

def test_a_child_burns():
    subprocess.run([sys.executable, "-c", "import time\\nwhile time.process_time() < BURN: pass"])
"""
_IDLE = """
import time

def test_it_waits(server):
    time.sleep(0.5)
"""
BURN = 0.8


@pytest.mark.parametrize("where", [["-n", "1"], ["-p", "no:xdist"]], ids=["xdist", "alone"])
def test_a_modules_cpu_is_its_processes_and_theirs(tmp_path: Path, where: list[str]) -> None:
    """The CPU of what a module starts counts in that module: a child it waited for, and a
    process still running when the module ends; a later module that only waits shows
    little, also when that process is stopped (and reaped) in its teardown."""
    root = Path(__file__).resolve().parents[2]
    for name, text in (
        ("conftest.py", _CONFTEST),
        ("test_busy.py", _BUSY),
        ("test_idle.py", _IDLE),
    ):
        (tmp_path / name).write_text(text.replace("BURN", str(BURN)))
    log = tmp_path / "phases.jsonl"
    env = {**os.environ, "KVTIER_PHASE_LOG": str(log), "PYTHONPATH": str(root)}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *where, "."],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    cpu = {line["phase"]: line["cpu"] for line in map(json.loads, log.read_text().splitlines())}
    assert cpu["pytest test_busy.py"] >= 2 * BURN - 0.1, cpu
    assert cpu["pytest test_idle.py"] < 0.5 * BURN, cpu
