"""Run `kvtier operator` as a real process under the restricted operator identity."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from localcluster import LocalCluster, free_port


class OperatorProcess:
    def __init__(
        self,
        cluster: LocalCluster,
        log_path: Path,
        kubeconfig: Path | None = None,
        namespace: str = "kvtier-system",
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log_path = log_path
        self.kubeconfig = kubeconfig or cluster.operator_kubeconfig
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

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
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
