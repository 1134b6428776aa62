"""`make test`'s scheduler (tests/module_groups.py): which modules start the session control
plane, read from their source, and the workers that never take them."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from tests.module_groups import ModuleGroups, group, misjudged, uses_session_cluster

SESSION = [  # the session control plane, by a test's parameter, a fixture's, or usefixtures
    "tests/e2e/test_operator_apply.py",
    "tests/e2e/test_probe.py",
    "tests/e2e/test_events.py",
    "tests/e2e/test_stored_crds.py",
]
OTHERS = [  # control planes of their own, a shared stack, or none
    "tests/e2e/test_faults.py",
    "tests/e2e/test_demo.py",
    "tests/e2e/test_target_lws.py",
    "tests/e2e/test_evictor_wiring.py",
    "tests/unit/test_quantity_parser.py",
    "tests/unit/test_record.py",
    "tests/unit/test_ready.py",
    "tests/unit/test_simulate.py",
]


@pytest.mark.parametrize("module", SESSION)
def test_a_module_asking_for_the_session_cluster_is_seen(module: str) -> None:
    assert uses_session_cluster(module)


@pytest.mark.parametrize("module", OTHERS)
def test_a_module_without_it_is_not(module: str) -> None:
    assert not uses_session_cluster(module)


def test_misjudged_names_a_module_whose_tests_use_it_unseen() -> None:
    tests = [
        ("tests/e2e/test_probe.py::test_a", ["cluster", "operator"]),
        ("tests/unit/test_record.py::test_b", ["tmp_path"]),
        ("tests/e2e/test_demo.py::test_c", ["tmp_path", "cluster"]),
    ]
    assert misjudged(tests) == ["tests/e2e/test_demo.py"]
    assert misjudged(tests[:2]) == []


@dataclass(eq=False)
class Worker:
    """What the scheduler uses of xdist's WorkerController."""

    id: str
    sent: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> SimpleNamespace:
        return SimpleNamespace(id=self.id)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class Config:
    option = SimpleNamespace(loadscopereorder=False)

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return [f"{self.workers}*popen"]


def run(workers: int, modules: list[str]) -> tuple[dict[str, list[str]], list[Worker]]:
    """Every test run to the end, one at a time per worker: the scopes each worker got, in
    the order it got them."""
    collection = [f"{m}::test_{i}" for m in modules for i in range(2)]
    sched = ModuleGroups(Config(workers))
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    sched.schedule()
    got: dict[str, list[str]] = {n.id: [] for n in nodes}
    while any(n.sent for n in nodes):
        for node in nodes:
            if node.sent:
                index = node.sent.pop(0)
                scope = group(collection[index].split("::", 1)[0])
                if scope not in got[node.id]:
                    got[node.id].append(scope)
                sched.mark_test_complete(node, index)
    return got, nodes


def test_a_third_of_the_workers_never_take_a_session_module() -> None:
    modules = [SESSION[0], *OTHERS[:3], *SESSION[1:], *OTHERS[3:]]
    got, nodes = run(6, modules)
    for worker in ("gw0", "gw1"):
        assert got[worker] and not set(got[worker]) & set(SESSION), got
    assert sum(bool(set(scopes) & set(SESSION)) for scopes in got.values()) <= 4
    # Every scope once, and each worker's in collection order (tests/early_release.py stops
    # a session fixture once a worker is past the last scope that uses it).
    handed = [s for scopes in got.values() for s in scopes]
    assert sorted(handed) == sorted(group(m) for m in modules)
    order = [group(m) for m in modules]
    for scopes in got.values():
        assert scopes == sorted(scopes, key=order.index)
    assert all(n.shutting_down for n in nodes)


def test_with_two_workers_both_take_session_modules() -> None:
    got, nodes = run(2, [*SESSION, *OTHERS])
    assert all(set(scopes) & set(SESSION) for scopes in got.values()), got
    assert all(n.shutting_down for n in nodes)
