"""Run `kvtier operator` as a real process under the restricted operator identity.

Tests run it with a short periodic resync (RESYNC_SECONDS), so that an idle window of a few
of its passes (`wait_resyncs`) sees a write only the periodic pass makes."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from localcluster import LocalCluster, free_port, tied

RESYNC_SECONDS = 5.0  # the operator's own default is 300 s; tests want several passes


class OperatorProcess:
    def __init__(
        self,
        cluster: LocalCluster,
        log_path: Path,
        kubeconfig: Path | None = None,
        namespace: str = "kvtier-system",
        metrics_args: Sequence[str] = ("--metrics-insecure",),
        resync_seconds: float | None = RESYNC_SECONDS,  # None: the operator's own default
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log_path = log_path
        self.kubeconfig = kubeconfig or cluster.operator_kubeconfig
        # Plain HTTP /metrics unless a test passes the TLS flags (metrics_url then says https).
        self.metrics_args = list(metrics_args)
        self.resync_seconds = resync_seconds
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            tied(
                [
                    sys.executable,
                    "-m",
                    "kvtier",
                    "operator",
                    f"--kubeconfig={self.kubeconfig}",
                    f"--metrics-port={self.metrics_port}",
                    f"--health-port={self.health_port}",
                    "--bind-address=127.0.0.1",
                    "--log-format=plain",
                    f"--namespace={self.namespace}",
                    *self.metrics_args,
                    *([f"--resync-seconds={self.resync_seconds:g}"] if self.resync_seconds else []),
                ]
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited: {self.log_path.read_text()[-2000:]}")
            if self.healthy():
                return self
            time.sleep(0.2)
        raise RuntimeError("operator did not become healthy in 30s")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=1
            ) as resp:
                return int(resp.status) == 200
        except OSError:
            return False

    @property
    def metrics_url(self) -> str:
        scheme = "http" if "--metrics-insecure" in self.metrics_args else "https"
        return f"{scheme}://127.0.0.1:{self.metrics_port}/metrics"

    def metrics(self, context: ssl.SSLContext | None = None, token: str | None = None) -> str:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.metrics_url, headers=headers)
        with urllib.request.urlopen(request, timeout=5, context=context) as r:
            return str(r.read().decode())

    def load(self) -> str:
        """The queue's depth, passes and reconciles so far, and the log's tail: what a
        failure message needs to tell a busy operator from one that decided not to act."""
        wanted = ("kvtier_workqueue_depth", "kvtier_resyncs_total", "kvtier_reconcile_total{")
        try:
            lines = [line for line in self.metrics().splitlines() if line.startswith(wanted)]
        except OSError as exc:
            lines = [f"metrics unreadable: {exc}"]
        tail = self.log_path.read_text(errors="replace").splitlines()[-15:]
        return "; ".join(lines) + "\noperator log tail:\n" + "\n".join(tail)

    def resyncs(self) -> int:
        """How many periodic passes the operator made (kvtier_resyncs_total)."""
        for line in self.metrics().splitlines():
            if line.startswith("kvtier_resyncs_total "):
                return int(float(line.split()[1]))
        return 0

    def wait_resyncs(self, passes: int = 2) -> None:
        """Return once `passes` periodic passes have queued every tier and their reconciles
        had a period to finish: one pass more is waited for, so an idle window ending here
        spans `passes` whole periodic passes."""
        assert self.resync_seconds is not None, "an idle window needs the tests' short period"
        start = self.resyncs()
        deadline = time.monotonic() + (passes + 2) * self.resync_seconds + 30
        while self.resyncs() < start + passes + 1:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the operator made {self.resyncs() - start} periodic passes of "
                    f"{passes + 1} in {(passes + 2) * self.resync_seconds + 30:.0f}s"
                )
            time.sleep(0.5)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
