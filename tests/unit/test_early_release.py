"""tests/early_release.py: a worker stops a session fixture once no scope it may still be
handed uses it, and never before."""

from __future__ import annotations

import pytest

from tests.early_release import EarlyRelease

GROUPS = {"t/a.py": "stack", "t/c.py": "stack"}  # a.py and c.py share a stack's scope

TESTS = [
    ("t/a.py::one", ["stack", "tmp_path"]),
    ("t/b.py::one", ["cluster", "operator"]),
    ("t/c.py::one", ["stack"]),
    ("t/d.py::one", ["cluster"]),
    ("t/d.py::two", ["cluster"]),
    ("t/e.py::one", ["tmp_path"]),
    ("t/f.py::one", []),
]


def planned() -> tuple[EarlyRelease, list[str]]:
    release = EarlyRelease(lambda module: GROUPS.get(module, module))
    release.plan(TESTS)
    stopped: list[str] = []
    for name in ("cluster", "operator", "stack"):
        release.register(name, lambda name=name: stopped.append(name))  # type: ignore[misc]
    return release, stopped


def run(release: EarlyRelease, nodeids: list[str]) -> None:
    fixtures = dict(TESTS)
    for nodeid in nodeids:
        release.before((nodeid, fixtures[nodeid]))


def test_a_worker_of_the_stack_keeps_it_through_its_scope_then_stops_it() -> None:
    release, stopped = planned()
    # The stack's scope runs whole on one worker: a.py, then c.py, past b.py's position.
    run(release, ["t/a.py::one", "t/c.py::one"])
    assert stopped == []
    # d.py's scope starts after the stack's and b.py's: nothing this worker is handed later
    # can use the stack or the operator (newest first); d.py itself uses the cluster.
    run(release, ["t/d.py::one", "t/d.py::two"])
    assert stopped == ["stack", "operator"]
    run(release, ["t/e.py::one"])
    assert stopped == ["stack", "operator", "cluster"]


def test_the_stack_goes_at_the_first_scope_after_its_own() -> None:
    release, stopped = planned()
    run(release, ["t/a.py::one", "t/c.py::one", "t/e.py::one"])
    assert stopped == ["stack", "operator", "cluster"]


def test_nothing_stops_while_a_later_scope_may_still_use_it() -> None:
    release, stopped = planned()
    # b.py's scope starts before d.py's, which uses the cluster: the cluster stays.
    run(release, ["t/b.py::one"])
    assert stopped == ["stack"]
    run(release, ["t/d.py::one", "t/d.py::two"])
    assert stopped == ["stack", "operator"]
    run(release, ["t/f.py::one"])
    assert stopped == ["stack", "operator", "cluster"]


def test_a_test_that_needs_a_stopped_fixture_is_refused() -> None:
    release, stopped = planned()
    run(release, ["t/e.py::one"])
    assert set(stopped) == {"cluster", "operator", "stack"}
    with pytest.raises(RuntimeError, match=r"t/d.py::one needs \['cluster'\]"):
        run(release, ["t/d.py::one"])


def test_a_test_outside_the_plan_stops_nothing() -> None:
    release, stopped = planned()
    release.before(("t/g.py::late", []))
    assert stopped == []
