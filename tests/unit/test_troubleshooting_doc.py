"""docs/troubleshooting.md explains every condition and Event reason the operator can emit.

The reasons are read from the source (policy/, render/, targets/, tiers/, controller/, observe/)
by their positions: the reason argument of Verdict, TierVerdict, Event, RenderError and the
sizing refusals, the first element of a policy problem, and values assigned to names holding a
reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    REPO / "operator" / "kvtier" / d
    for d in ("policy", "render", "targets", "tiers", "controller", "observe")
]
DOC = REPO / "docs" / "troubleshooting.md"
_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]+$")
_REASON_FIRST = {"RenderError", "sized_false"}  # (reason, message, ...)


def _constants(node: ast.expr | None) -> set[str]:
    if isinstance(node, ast.IfExp):
        return _constants(node.body) | _constants(node.orelse)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} if _CAMEL.match(node.value) else set()
    return set()


def _reasons_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            found |= {r for kw in node.keywords if kw.arg == "reason" for r in _constants(kw.value)}
            if name == "Verdict" and len(node.args) >= 3:
                found |= _constants(node.args[2])
            if name == "Event" and len(node.args) >= 2:
                found |= _constants(node.args[1])
            if name in _REASON_FIRST and node.args:
                found |= _constants(node.args[0])
            if name == "append" and node.args and isinstance(node.args[0], ast.Tuple):
                found |= _constants(node.args[0].elts[0]) if node.args[0].elts else set()
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                if "reason" in name.lower() or name.startswith("READY_"):
                    found |= _constants(node.value)
    return found


def code_reasons() -> set[str]:
    reasons: set[str] = set()
    for directory in SOURCES:
        for path in sorted(directory.rglob("*.py")):
            reasons |= _reasons_in(ast.parse(path.read_text(encoding="utf-8")))
    return reasons


def doc_reasons() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([A-Za-z0-9]+)` \|", text, re.M))


def test_the_extractor_sees_the_known_reasons() -> None:
    reasons = code_reasons()
    known = {"Applied", "TargetNotFound", "ProbeTimedOut", "RecomputeWins", "AtomicSpec"}
    assert known <= reasons
    assert "ConfigMap" not in reasons and "PersistentVolumeClaim" not in reasons


def test_every_reason_in_the_code_is_documented() -> None:
    missing = sorted(code_reasons() - doc_reasons())
    assert not missing, f"add these reasons to {DOC.relative_to(REPO)}: {missing}"


def test_the_doc_names_no_reason_the_code_lacks() -> None:
    stale = sorted(doc_reasons() - code_reasons())
    assert not stale, f"{DOC.relative_to(REPO)} documents reasons no code emits: {stale}"


def test_a_new_reason_would_be_caught() -> None:
    tree = ast.parse('Verdict("Ready", "False", "BrandNewReason", "m")')
    assert _reasons_in(tree) - doc_reasons() == {"BrandNewReason"}
