"""`free_port`: the ports the test clusters' components listen on are never handed to two
callers at once, across the processes of a run (pytest's workers each start clusters)."""

from __future__ import annotations

import socket
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import localcluster
from localcluster import PORTS, free_port

HACK = Path(localcluster.__file__).resolve().parent

TAKE = "import sys; sys.path.insert(0, sys.argv[1]); from localcluster import free_port; " + (
    "print(' '.join(str(free_port()) for _ in range(40)))"
)


def test_processes_taking_ports_together_never_get_the_same_one() -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", TAKE, str(HACK)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    ports = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]
    assert len(ports) == 160
    assert len(set(ports)) == 160, "a port was handed to two callers"
    assert all(p in PORTS for p in ports), "a port in the kernel's ephemeral range"


def test_a_port_something_listens_on_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(localcluster, "PORT_LEDGER", tmp_path / "ports")
    first = free_port()
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as busy:
        busy.bind(("127.0.0.1", first + 1))
        busy.listen()
        assert free_port() == first + 2


def test_the_ledger_wraps_around_the_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ports"
    monkeypatch.setattr(localcluster, "PORT_LEDGER", ledger)
    ledger.write_text(str(PORTS.stop - 1))
    assert free_port() == PORTS.start
    ledger.write_text("not a port")
    assert free_port() == PORTS.start
