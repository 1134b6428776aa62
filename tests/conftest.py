"""Shared fixtures: the local control plane starts once per session, only when an
e2e test asks for it; pure tests never touch it."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from kubernetes import client, config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack" / "localcluster"))

from localcluster import LocalCluster  # noqa: E402

# The property tests run beside e2e modules that load both cores (`make test` runs them side
# by side): how fast an example is drawn or run says nothing about the code under test, so
# neither a per-example deadline nor the draw-speed health check may fail a test.
settings.register_profile("kvtier", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kvtier")
from tests import early_release, module_times  # noqa: E402
from tests.early_release import RELEASE  # noqa: E402
from tests.module_groups import ModuleGroups, group, misjudged  # noqa: E402
from tests.roomy import roomy_tmp_path  # noqa: E402, F401  (a fixture, for every test)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    # A terminated run (a CI time limit, `timeout`, kill) ends like Ctrl-C: pytest then
    # tears the fixtures down, so the control planes and operators they started (each in a
    # session of its own) are stopped instead of left running.
    signal.signal(signal.SIGTERM, _interrupt)
    # What the tests start stops when the worker that started it dies (localcluster.tied).
    os.environ["KVTIER_STOP_WITH_PARENT"] = "1"
    module_times.register(config)
    early_release.register(config)


def api_client(kubeconfig: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return api


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    workdir = Path(tempfile.mkdtemp(prefix="kvtier-e2e-"))
    local = LocalCluster(workdir)
    try:
        local.up()
        RELEASE.register("cluster", local.down)
        yield local
    finally:
        local.down()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def admin_api(cluster: LocalCluster) -> client.ApiClient:
    return api_client(cluster.admin_kubeconfig)


@pytest.fixture(scope="session")
def operator_api(cluster: LocalCluster) -> client.ApiClient:
    return api_client(cluster.operator_kubeconfig)


LONG_WAITS = frozenset(
    f"tests/e2e/{name}.py" for name in ("test_faults", "test_real_contracts", "test_disk_pressure")
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e needs the cluster: mark it so `-m "not e2e"` works.

    Sorted for `make test`'s workers (tests/module_groups.py hands out modules, or groups of
    them, in this order): the modules sharing a stack and the longest waits first (LONG_WAITS:
    minutes of idle windows and restarts, at about a quarter of a core, which otherwise met
    the other waiting modules mid-run and left the cores half idle), then the other e2e
    modules, the ones that wait on control planes; the pure tests, many and short, fill the
    last minutes."""
    wrong = misjudged((item.nodeid, getattr(item, "fixturenames", ())) for item in items)
    if wrong:  # the scheduler would hand them to workers meant to start no session cluster
        raise pytest.UsageError(
            f"{', '.join(wrong)}: its tests use the session control plane (fixture "
            "`cluster`) where tests/module_groups.py does not look, so `make test` could "
            "send it to a worker meant to start none; ask for the fixture as a parameter "
            "of a test or a fixture, or in `usefixtures`"
        )
    e2e_dir = REPO / "tests" / "e2e"
    for item in items:
        if e2e_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)

    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::", 1)[0]
        if group(module) != module or module in LONG_WAITS:
            return 0
        return 1 if item.get_closest_marker("e2e") else 2

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleGroups | None:
    """`--dist loadgroup`: whole modules and the groups of tests/module_groups.py."""
    return ModuleGroups(config, log) if config.getoption("dist") == "loadgroup" else None


def pytest_sessionstart(session: pytest.Session) -> None:
    """fio is a hard requirement (make deps installs it): its tests must never skip."""
    if shutil.which("fio") is None:
        raise pytest.UsageError("fio is not installed; run `make deps` (hack/install-system-deps)")
