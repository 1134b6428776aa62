"""What the test suite starts (control planes, controllers, operators) stops when the process
that started it dies: a pytest-xdist worker killed before its teardown leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster import tied

# The child ignores SIGTERM, as a component stuck in its own shutdown does (an API server
# whose etcd went at the same moment): it must stop all the same.
STARTER = """
import subprocess, sys
sys.path.insert(0, {path!r})
from localcluster import tied
child = subprocess.Popen(tied([sys.executable, "-c", {child!r}]), start_new_session=True)
print(child.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""
CHILD = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring SIGTERM', flush=True); time.sleep(300)"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _child_after_starter_killed(stop_with_parent: bool, wait: float) -> bool:
    """Whether the child still runs `wait` seconds after its starter was killed (or as soon
    as it is gone)."""
    env = {**os.environ, "KVTIER_STOP_WITH_PARENT": "1" if stop_with_parent else "0"}
    path = str(Path(__file__).resolve().parents[2] / "hack" / "localcluster")
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER.format(path=path, child=CHILD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert starter.stdout is not None
    # The starter's line (the child's pid) and the child's own, in either order: the two
    # processes write to the same pipe, and a busy machine has run the child first.
    lines = [starter.stdout.readline().strip() for _ in range(2)]
    assert "ignoring SIGTERM" in lines, lines
    lines.remove("ignoring SIGTERM")
    pid = int(lines[0])
    try:
        assert _alive(pid)
        starter.kill()  # no teardown: SIGKILL, as xdist ends a worker it cannot stop
        starter.wait()
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_a_tied_process_stops_with_its_starter() -> None:
    assert not _child_after_starter_killed(stop_with_parent=True, wait=10)


def test_outside_the_suite_a_process_outlives_its_starter() -> None:
    """`localcluster up` leaves the control plane running for the user: no tie there."""
    assert _child_after_starter_killed(stop_with_parent=False, wait=1)


def test_the_tie_wraps_the_command_and_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVTIER_STOP_WITH_PARENT", "1")
    assert tied(["etcd", "--name=local"])[-2:] == ["etcd", "--name=local"]
    monkeypatch.setenv("KVTIER_STOP_WITH_PARENT", "0")
    assert tied(["etcd", "--name=local"]) == ["etcd", "--name=local"]
