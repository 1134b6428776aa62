"""Every number of docs/sizing.md's worked examples, recomputed by running the `kvtier plan`
command each one shows (with -o json)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "sizing.md"
_EXAMPLE = re.compile(r"```sh\n(kvtier plan [^\n]+)\n```\n\n((?:\|[^\n]*\n)+)")
_ROW = re.compile(r"^\| `([A-Za-z0-9.]+)` \| ([^|]+?) \|", re.M)


def _examples() -> list[tuple[str, list[tuple[str, str]]]]:
    text = DOC.read_text(encoding="utf-8")
    return [(cmd, _ROW.findall(table)) for cmd, table in _EXAMPLE.findall(text)]


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    number = text.replace(",", "")
    if re.fullmatch(r"-?[0-9]+", number):
        return int(number)
    if re.fullmatch(r"-?[0-9]*\.[0-9]+", number):
        return float(number)
    return text


def _lookup(document: dict[str, Any], path: str) -> Any:
    head, *rest = path.split(".")
    if head == "tiers":
        name, field = rest
        return next(t for t in document["tiers"] if t["name"] == name)[field]
    node: Any = document[head]
    for key in rest:
        node = node[key]
    return node


def test_the_doc_has_worked_examples() -> None:
    examples = _examples()
    assert len(examples) >= 4
    assert all(len(rows) >= 4 for _, rows in examples)


@pytest.mark.parametrize(("command", "rows"), _examples(), ids=lambda x: str(x)[:60])
def test_worked_example(
    command: str, rows: list[tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = shlex.split(command)[1:]
    code = main([*argv, "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    for path, shown in rows:
        assert _lookup(document, path) == _value(shown.strip()), (command, path)
