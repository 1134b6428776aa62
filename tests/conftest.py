"""Shared fixtures: the local control plane starts once per session, only when an
e2e test asks for it; pure tests never touch it."""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from kubernetes import client, config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack" / "localcluster"))

from localcluster import LocalCluster  # noqa: E402
from tests.module_times import ModuleTimes  # noqa: E402


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    # A terminated run (a CI time limit, `timeout`, kill) ends like Ctrl-C: pytest then
    # tears the fixtures down, so the control planes and operators they started (each in a
    # session of its own) are stopped instead of left running.
    signal.signal(signal.SIGTERM, _interrupt)
    config.pluginmanager.register(ModuleTimes(), "kvtier-module-times")


def api_client(kubeconfig: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return api


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    workdir = Path(tempfile.mkdtemp(prefix="kvtier-e2e-"))
    local = LocalCluster(workdir)
    try:
        yield local.up()
    finally:
        local.down()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def admin_api(cluster: LocalCluster) -> client.ApiClient:
    return api_client(cluster.admin_kubeconfig)


@pytest.fixture(scope="session")
def operator_api(cluster: LocalCluster) -> client.ApiClient:
    return api_client(cluster.operator_kubeconfig)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e needs the cluster: mark it so `-m "not e2e"` works."""
    e2e_dir = REPO / "tests" / "e2e"
    for item in items:
        if e2e_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def pytest_sessionstart(session: pytest.Session) -> None:
    """fio is a hard requirement (make deps installs it): its tests must never skip."""
    if shutil.which("fio") is None:
        raise pytest.UsageError("fio is not installed; run `make deps` (hack/install-system-deps)")
