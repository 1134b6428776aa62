"""Golden files of the writes kvtier renders: one YAML file per case of tests/golden/cases.py
under tests/golden/rendered/, checked byte for byte by tests/unit/test_golden_writes.py.

Regenerate (never automatic; review the diff, it is what changed in kvtier's writes):

    make golden        # or: python -m tests.golden.regenerate
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

# tests/served_schemas.py reads KServe's CRDs through hack/localcluster, which tests/conftest.py
# puts on the path under pytest; run as a module, this does.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack" / "localcluster"))

from kvtier.policy.contract import Decision
from kvtier.policy.decide import decide
from tests.golden.cases import Case, cases, facts

RENDERED = Path(__file__).resolve().parent / "rendered"
SUFFIX = ".yaml"
COMMAND = "make golden (python -m tests.golden.regenerate)"


def golden(decision: Decision) -> dict[str, Any]:
    """What a golden pins: every desired write, status.plan and the conditions (a refusal's
    reason and message are there), without their times."""
    return {
        "conditions": [
            {k: c[k] for k in ("type", "status", "reason", "message")}
            for c in decision.status["conditions"]
        ],
        "desired": [
            {
                "action": w.action,
                "apiVersion": w.api_version,
                "kind": w.kind,
                "name": w.name,
                "namespace": w.namespace,
                "body": w.body,
                "summary": w.summary,
            }
            for w in decision.desired
        ],
        "plan": decision.status.get("plan"),
    }


class _Dumper(yaml.CSafeDumper):
    """Block style throughout, multi-line strings (summaries) as literal blocks, and every
    value written out where it is (no anchors: which objects are shared is no output).
    libyaml's emitter writes what PyYAML's does, byte for byte, in a fifth of the time."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: _Dumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def serialise(data: dict[str, Any]) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,
    )


def text(case: Case) -> str:
    """The golden file of one case, as the code renders it now."""
    return serialise(golden(decide(facts(case))))


def main() -> int:
    RENDERED.mkdir(exist_ok=True)
    wanted = {f"{c.name}{SUFFIX}": text(c) for c in cases()}
    for stale in sorted(p for p in RENDERED.iterdir() if p.name not in wanted):
        stale.unlink()
        print(f"removed {stale.name}")
    changed = 0
    for name, content in wanted.items():
        path = RENDERED / name
        data = content.encode()
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            changed += 1
    print(f"{len(wanted)} golden files, {changed} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
