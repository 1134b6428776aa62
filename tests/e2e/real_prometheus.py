"""The real Prometheus the e2e tests scrape with: built from its Go module by
hack/prometheus/build (cached), started on a free port with the test's configuration."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from localcluster import free_port
from tests.e2e.kube_helpers import eventually

REPO = Path(__file__).resolve().parents[2]


def prometheus_binary() -> Path:
    out = subprocess.run(
        [str(REPO / "hack" / "prometheus" / "build")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "prometheus"


@contextmanager
def running_prometheus(workdir: Path, config: str) -> Iterator[str]:
    """Prometheus with `config` (prometheus.yml text) and its data in `workdir`, ready; its
    URL. Stopped, and `workdir` removed, afterwards."""
    (workdir / "prometheus.yml").write_text(config)
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            str(prometheus_binary()),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        eventually(ready, 30, "Prometheus ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
