"""tests/early_release.py: a worker stops a session fixture once no scope it may still be
handed uses it, and never before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.early_release import EarlyRelease

GROUPS = {"t/a.py": "stack", "t/c.py": "stack"}  # a.py and c.py share a stack's scope

TESTS = [
    ("t/a.py::one", ["stack", "tmp_path"]),
    ("t/b.py::one", ["cluster", "operator"]),
    ("t/c.py::one", ["stack"]),
    ("t/d.py::one", ["cluster"]),
    ("t/d.py::two", ["cluster"]),
    ("t/e.py::one", ["tmp_path"]),
    ("t/f.py::one", []),
]


def planned() -> tuple[EarlyRelease, list[str]]:
    release = EarlyRelease(lambda module: GROUPS.get(module, module))
    release.plan(TESTS)
    stopped: list[str] = []
    for name in ("cluster", "operator", "stack"):
        release.register(name, lambda name=name: stopped.append(name))  # type: ignore[misc]
    return release, stopped


def run(release: EarlyRelease, nodeids: list[str]) -> None:
    fixtures = dict(TESTS)
    for nodeid in nodeids:
        release.before((nodeid, fixtures[nodeid]))


# What one worker runs, step by step, and what has been stopped after each step.
WORKERS = {
    # The stack's scope runs whole on one worker: a.py, then c.py, past b.py's position. At
    # d.py (after the stack's and b.py's scopes) nothing this worker is handed later can
    # use the stack or the operator (newest first); d.py itself uses the cluster.
    "stack-then-cluster": [
        (["t/a.py::one", "t/c.py::one"], []),
        (["t/d.py::one", "t/d.py::two"], ["stack", "operator"]),
        (["t/e.py::one"], ["stack", "operator", "cluster"]),
    ],
    "stack-then-pure": [
        (["t/a.py::one", "t/c.py::one", "t/e.py::one"], ["stack", "operator", "cluster"]),
    ],
    # b.py's scope starts before d.py's, which uses the cluster: the cluster stays.
    "operator-then-cluster": [
        (["t/b.py::one"], ["stack"]),
        (["t/d.py::one", "t/d.py::two"], ["stack", "operator"]),
        (["t/f.py::one"], ["stack", "operator", "cluster"]),
    ],
}


@pytest.mark.parametrize("steps", WORKERS.values(), ids=WORKERS.keys())
def test_a_fixture_stops_at_the_first_scope_no_later_one_can_need_it(
    steps: list[tuple[list[str], list[str]]],
) -> None:
    release, stopped = planned()
    for nodeids, expected in steps:
        run(release, nodeids)
        assert stopped == expected, nodeids


def test_a_test_that_needs_a_stopped_fixture_is_refused() -> None:
    release, stopped = planned()
    run(release, ["t/e.py::one"])
    assert set(stopped) == {"cluster", "operator", "stack"}
    with pytest.raises(RuntimeError, match=r"t/d.py::one needs \['cluster'\]"):
        run(release, ["t/d.py::one"])


def test_a_test_outside_the_plan_stops_nothing() -> None:
    release, stopped = planned()
    release.before(("t/g.py::late", []))
    assert stopped == []


# Through pytest itself: a session fixture runs a process, as the control planes do; the
# modules run in collection order in one process (tests/conftest.py wires the same plugin).
_CONFTEST = """
import os, subprocess, sys, pytest
from tests import early_release

early_release.RELEASE.scope = lambda module: module  # no module groups here

def pytest_configure(config):
    early_release.register(config)

@pytest.fixture(scope="session")
def server():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    def stop():
        proc.kill()
        proc.wait()
    early_release.RELEASE.register("server", stop)
    with open(os.environ["SERVER_PID"], "w") as f:
        f.write(str(proc.pid))
    yield proc
    stop()
"""

_USES = """
def test_uses(server):
    assert server.poll() is None
"""

_WAITS = """
import os

def test_sees_the_server():
    pid = int(open(os.environ["SERVER_PID"]).read())
    alive = os.path.exists(f"/proc/{pid}")
    assert alive == (os.environ["LATER_USER"] == "1")
"""


@pytest.mark.parametrize("later_user", [False, True], ids=["last-user-done", "a-later-user"])
def test_pytest_runs_the_stop_between_modules(tmp_path: Path, later_user: bool) -> None:
    """test_a uses the fixture, test_b does not: when no module after test_b uses it, it is
    stopped before test_b runs; when test_c uses it, test_b (and test_c) find it running."""
    root = Path(__file__).resolve().parents[2]
    files = {"conftest.py": _CONFTEST, "test_a.py": _USES, "test_b.py": _WAITS}
    if later_user:
        files["test_c.py"] = _USES
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "SERVER_PID": str(tmp_path / "server.pid"),
        "LATER_USER": "1" if later_user else "0",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(files) - 1} passed" in proc.stdout, proc.stdout
