"""`wait_manager_ready`: a controller-runtime manager counts as started only once its
webhook server listens, not when its /readyz first answers (which comes before)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from localcluster import ClusterError, free_port, wait_manager_ready

# A manager as controller-runtime starts one: the probe server answers at once, the webhook
# server listens `delay` seconds later.
MANAGER = textwrap.dedent(
    """
    import http.server, socket, sys, threading, time
    health, webhook, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", health), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if delay < 0:
        sys.exit(3)
    time.sleep(delay)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", webhook))
    listener.listen()
    time.sleep(60)
    """
)


def _manager(delay: float) -> tuple[subprocess.Popen[bytes], int, int]:
    health, webhook = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-c", MANAGER, str(health), str(webhook), str(delay)])
    return proc, health, webhook


def test_ready_waits_for_the_webhook_server_not_only_readyz() -> None:
    proc, health, webhook = _manager(delay=1.5)
    try:
        started = time.monotonic()
        wait_manager_ready(proc, "manager", health, webhook, lambda: "")
        assert time.monotonic() - started >= 1.4  # readyz answered within about 0.1 s
    finally:
        proc.kill()
        proc.wait()


def test_a_manager_that_never_listens_is_an_error_naming_what_is_missing() -> None:
    proc, health, _ = _manager(delay=1.0)
    try:
        with pytest.raises(ClusterError, match="webhook server not listening in 2s: tail"):
            wait_manager_ready(proc, "manager", health, free_port(), lambda: "tail", timeout=2)
    finally:
        proc.kill()
        proc.wait()


def test_a_manager_that_exits_is_an_error_with_its_log() -> None:
    proc, health, webhook = _manager(delay=-1)
    with pytest.raises(ClusterError, match="manager exited: its log"):
        wait_manager_ready(proc, "manager", health, webhook, lambda: "its log", timeout=10)
