"""How `make test` shares the suite among its pytest-xdist workers, each with control planes
of its own: a module runs whole on one worker (its module fixtures start once), and the
modules that use one of the session stacks below run on the same worker, so each stack (a
control plane with another project's controller on it) starts once per run.

The modules that use the session control plane (tests/conftest.py `cluster`, and the
operator and clients on it) run on two thirds of the workers only: each worker that takes
one starts a control plane of its own, which costs about 10 CPU-s to start and 2 to 3 a
minute to keep, on a suite that keeps both cores busy. The other workers take everything
else: the modules with control planes of their own, and the pure tests.

xdist's own `loadgroup` cannot do this here: it renames each test's node id to carry its
group, and the pytest release this project pins reads node ids from elsewhere."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent

# A session fixture's name → the group of every module that names it.
STACKS = {
    "kserve_isvc_cluster": "kserve-isvc",
    "kserve_isvc_stack": "kserve-isvc",
    "kserve_stack": "kserve-llmisvc",
}
SESSION_CLUSTER = "cluster"  # the fixture that starts a worker's session control plane


@cache
def group(module: str) -> str:
    """The group of a test module (its path from the repository): a stack's, else its own."""
    text = (REPO / module).read_text(encoding="utf-8")
    for fixture, name in STACKS.items():
        if re.search(rf"\b{fixture}\b", text):
            return name
    return module


def _is_fixture(fn: ast.FunctionDef) -> bool:
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


@cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _functions(path: Path) -> Iterator[tuple[str, bool, frozenset[str]]]:
    """The module's functions: (name, is a fixture, the names of its parameters)."""
    for fn in ast.walk(_parsed(path)):
        if isinstance(fn, ast.FunctionDef):
            args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
            yield fn.name, _is_fixture(fn), frozenset(a.arg for a in args)


def _used_by_name(path: Path) -> set[str]:
    """The fixture names a module's `usefixtures` marks give."""
    return {
        arg.value
        for call in ast.walk(_parsed(path))
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "usefixtures"
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    }


def _closure(asks: dict[str, frozenset[str]], inherited: frozenset[str]) -> frozenset[str]:
    """The fixture names among `asks` (name → the names it asks for) that reach the session
    control plane through `asks`, or through a name in `inherited` they do not define."""
    found = {SESSION_CLUSTER} | (inherited - asks.keys())
    while grown := {n for n, params in asks.items() if n not in found and params & found}:
        found |= grown
    return frozenset(found)


def _fixtures(path: Path) -> dict[str, frozenset[str]]:
    return {name: params for name, fixture, params in _functions(path) if fixture}


@cache
def session_fixtures() -> frozenset[str]:
    """The shared fixtures (of the conftest files and the helper modules under tests/ and
    bench/) that start the session control plane, themselves or through the ones they ask
    for."""
    asks: dict[str, frozenset[str]] = {}
    for top in ("tests", "bench"):
        for path in sorted((REPO / top).rglob("*.py")):
            if not path.name.startswith("test_"):
                asks.update(_fixtures(path))
    return _closure(asks, frozenset())


@cache
def uses_session_cluster(module: str) -> bool:
    """Whether a test module's tests or its own fixtures ask for the session control plane
    (by a parameter, or by name in `usefixtures`); a fixture the module defines stands for
    a shared one of its name, as in pytest."""
    path = REPO / module
    wanted = _closure(_fixtures(path), session_fixtures())
    asked = set(_used_by_name(path))
    for name, fixture, params in _functions(path):
        if fixture or name.startswith("test"):
            asked |= params
    return bool(asked & wanted)


def misjudged(tests: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """The modules whose collected tests use the session control plane (every fixture each
    test uses, as pytest resolved them) although uses_session_cluster says they do not."""
    used = {nodeid.split("::", 1)[0] for nodeid, fixtures in tests if SESSION_CLUSTER in fixtures}
    return sorted(m for m in used if not uses_session_cluster(m))


class ModuleGroups(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scope scheduling with a module's group as its scope: groups are handed out in
    collection order (tests/conftest.py sorts it), the next one when a worker is nearly done;
    a third of the workers (rounded down) skip the scopes that use the session control
    plane."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.without_session: frozenset[str] | None = None  # worker ids, fixed at start
        self.session_scopes: dict[str, bool] = {}

    def _split_scope(self, nodeid: str) -> str:
        return group(nodeid.split("::", 1)[0])

    def _may_run(self, node: Any, scope: str) -> bool:
        if self.without_session is None:
            ids = sorted(n.gateway.id for n in self.nodes)
            self.without_session = frozenset(ids[: len(ids) // 3])
        if node.gateway.id not in self.without_session:
            return True
        if scope not in self.session_scopes:
            self.session_scopes[scope] = any(
                uses_session_cluster(nodeid.split("::", 1)[0]) for nodeid in self.workqueue[scope]
            )
        return not self.session_scopes[scope]

    def _assign_work_unit(self, node: Any) -> None:
        """The first scope in the queue this worker may run, else it stops."""
        scope = next((s for s in self.workqueue if self._may_run(node, s)), None)
        if scope is None:
            node.shutdown()
            return
        self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not any(self._may_run(node, s) for s in self.workqueue):
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        self._assign_work_unit(node)
