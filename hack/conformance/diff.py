"""Compare two conformance documents, ignoring their provenance (date, command, host timing).

Usage: python3 hack/conformance/diff.py GOLDEN NEW   (exit 1 and a listing on any difference)
Standard library only: it runs outside the vLLM virtualenv.
"""

from __future__ import annotations

import json
import sys
from typing import Any

IGNORED = ("provenance",)


def walk(path: str, old: Any, new: Any, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key in IGNORED and not path:
                continue
            if key not in new:
                out.append(f"{path}/{key}: removed")
            elif key not in old:
                out.append(f"{path}/{key}: added {json.dumps(new[key])[:200]}")
            else:
                walk(f"{path}/{key}", old[key], new[key], out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            walk(f"{path}[{index}]", a, b, out)
    elif old != new:
        out.append(f"{path}: {json.dumps(old)[:200]} -> {json.dumps(new)[:200]}")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            golden = json.load(f)
    except FileNotFoundError:
        print(f"{argv[1]}: no golden file yet (hack/conformance/run --write)", file=sys.stderr)
        return 1
    with open(argv[2], encoding="utf-8") as f:
        new = json.load(f)
    # Cases are matched by id, so an added or removed case shows as one line.
    for doc in (golden, new):
        if isinstance(doc.get("cases"), list):
            doc["cases"] = {c["id"]: c for c in doc["cases"]}
    out: list[str] = []
    walk("", golden, new, out)
    for line in out[:200]:
        print(line)
    if len(out) > 200:
        print(f"... and {len(out) - 200} more differences")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
