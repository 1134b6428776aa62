"""The package's layers import only downward (README, Layout): render/ never reaches into
policy/, targets/ into neither, tiers/ into none of the three, and the pure core (api, sizing,
settings, tiers, targets, render, policy) never into I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "kvtier"
IO_LAYERS = ("kvtier.controller", "kvtier.kube", "kvtier.observe")
FORBIDDEN = {
    # The models sit below the registries: the CRD generator (kvtier.generate, above them)
    # stamps the registered target kinds into their schemas.
    "api": (
        "kvtier.policy",
        "kvtier.render",
        "kvtier.settings",
        "kvtier.targets",
        "kvtier.tiers",
        "kvtier.generate",
        *IO_LAYERS,
    ),
    # Sizing keeps its own facts of each disk type (sizing/disk_types.py), never the registry's.
    "sizing": (
        "kvtier.api",
        "kvtier.policy",
        "kvtier.render",
        "kvtier.settings",
        "kvtier.tiers",
        *IO_LAYERS,
    ),
    "render": ("kvtier.policy", *IO_LAYERS),
    # The target kinds sit below render/ and policy/: of render/ they import only the
    # builders no target imports back (not render.writes, which asks the registry).
    "targets": (
        "kvtier.policy",
        "kvtier.render.writes",
        "kvtier.settings",
        "kvtier.tiers.registry",
        *IO_LAYERS,
    ),
    # The tier types sit below the target kinds (which read only tiers.base), render.writes
    # and policy/, which ask the registry.
    "tiers": ("kvtier.policy", "kvtier.render.writes", "kvtier.targets", *IO_LAYERS),
    "policy": IO_LAYERS[:2],  # decide reads observations as values, never I/O itself
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files
    problems = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in files
        for module in sorted(_imports(path))
        if module.startswith(FORBIDDEN[layer])
    ]
    assert not problems, "\n".join(problems)
