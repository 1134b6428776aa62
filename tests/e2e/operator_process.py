"""Run `kvtier operator` as a real process under the restricted operator identity."""

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

from localcluster import LocalCluster, free_port


class OperatorProcess:
    def __init__(
        self,
        cluster: LocalCluster,
        log_path: Path,
        kubeconfig: Path | None = None,
        namespace: str = "kvtier-system",
        metrics_args: Sequence[str] = ("--metrics-insecure",),
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log_path = log_path
        self.kubeconfig = kubeconfig or cluster.operator_kubeconfig
        # Plain HTTP /metrics unless a test passes the TLS flags (metrics_url then says https).
        self.metrics_args = list(metrics_args)
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
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
            ],
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

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
