"""How `make test` shares the suite among its pytest-xdist workers, each with control planes
of its own: a module runs whole on one worker (its module fixtures start once), and the
modules that use one of the session stacks below run on the same worker, so each stack (a
control plane with another project's controller on it) starts once per run.

xdist's own `loadgroup` cannot do this here: it renames each test's node id to carry its
group, and the pytest release this project pins reads node ids from elsewhere."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent

# A session fixture's name → the group of every module that names it.
STACKS = {
    "kserve_isvc_cluster": "kserve-isvc",
    "kserve_isvc_stack": "kserve-isvc",
    "kserve_stack": "kserve-llmisvc",
}


@cache
def group(module: str) -> str:
    """The group of a test module (its path from the repository): a stack's, else its own."""
    text = (REPO / module).read_text(encoding="utf-8")
    for fixture, name in STACKS.items():
        if re.search(rf"\b{fixture}\b", text):
            return name
    return module


class ModuleGroups(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scope scheduling with a module's group as its scope: groups are handed out in
    collection order (tests/conftest.py sorts it), the next one when a worker is nearly done."""

    def _split_scope(self, nodeid: str) -> str:
        return group(nodeid.split("::", 1)[0])
