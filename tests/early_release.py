"""Session fixtures a worker stops as soon as none of the tests it may still run needs them.

`make test`'s workers take scopes (a module, or a group of them: tests/module_groups.py) in
collection order, and each runs its scopes' tests in that order. So once a worker starts a
scope whose first test comes after the first test of every scope using a session fixture, no
later test of that worker uses it. The control planes with their controllers (a worker's
session cluster and operator, KServe's stacks) otherwise stayed up, idle, until the worker
ended, while it ran the pure tests that come last: about 2 to 3 CPU-s a minute each.

A fixture registers how it stops (`RELEASE.register`); its own teardown still runs at the
end of the session, so each stop must be safe to call twice. `register(config)` (from
tests/conftest.py) plans the run once it is collected and checks before each test."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import pytest

from tests.module_groups import group

# A test: its id and the names of every fixture it uses, those they use included.
Test = tuple[str, Sequence[str]]


class EarlyRelease:
    def __init__(self, scope: Callable[[str], str]) -> None:
        self.scope = scope  # a module's path → the scope the scheduler hands out
        self.first: dict[str, int] = {}  # test id → where its scope's first test is
        self.last_user: dict[str, int] = {}  # fixture → the last scope using it, by first test
        self.active: dict[str, Callable[[], None]] = {}  # registration order: dependents last
        self.released: list[str] = []

    def plan(self, tests: Iterable[Test]) -> None:
        starts: dict[str, int] = {}
        for index, (nodeid, fixtures) in enumerate(tests):
            start = starts.setdefault(self.scope(nodeid.split("::", 1)[0]), index)
            self.first[nodeid] = start
            for name in fixtures:
                self.last_user[name] = max(self.last_user.get(name, -1), start)

    def register(self, fixture: str, stop: Callable[[], None]) -> None:
        self.active[fixture] = stop

    def before(self, test: Test) -> None:
        """Stop what no test from this one on can use (newest first: an operator before its
        cluster); refuse a test that needs a fixture already stopped."""
        nodeid, fixtures = test
        needs = set(fixtures)
        stale = needs.intersection(self.released)
        if stale:
            raise RuntimeError(f"{nodeid} needs {sorted(stale)}, stopped early")
        start = self.first.get(nodeid)
        if start is None:  # not in the plan (collected later): release nothing
            return
        for name in reversed(list(self.active)):
            if name not in needs and self.last_user.get(name, -1) < start:
                self.active.pop(name)()
                self.released.append(name)


# The fixtures' stops, for this process's run.
RELEASE = EarlyRelease(group)


class _Plugin:
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Only where tests run in collection order: one process, or `make test`'s scheduler
        # (ModuleGroups) without xdist's reordering of scopes by size.
        config = session.config
        dist = config.getoption("dist", "no")
        if dist == "no" or (dist == "loadgroup" and not config.getoption("loadscopereorder")):
            RELEASE.plan(_test(item) for item in session.items)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        RELEASE.before(_test(item))


def _test(item: pytest.Item) -> Test:
    return item.nodeid, getattr(item, "fixturenames", [])


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(_Plugin(), "kvtier-early-release")
