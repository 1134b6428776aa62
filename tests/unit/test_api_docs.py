"""docs/api.md is generated from the pydantic models and checked for drift like the CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kvtier.api.crd import DEFINITIONS
from kvtier.generate import DEFAULT_API_DOC, api_doc, check_api_doc, main

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / DEFAULT_API_DOC


def test_committed_api_reference_is_up_to_date() -> None:
    assert check_api_doc(COMMITTED) == [], "run `python -m kvtier.generate --write`"


def _aliases(model: type[BaseModel], prefix: str) -> set[str]:
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}"
        paths.add(path)
        for nested in _models(field.annotation):
            suffix = "[]" if _is_list(field.annotation) else ""
            paths |= _aliases(nested, path + suffix)
    return paths


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models(arg)]


def _is_list(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", None)
    if origin in (list, tuple):
        return True
    return any(_is_list(a) for a in getattr(annotation, "__args__", ()) if a is not type(None))


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.kind)
def test_every_model_field_is_documented(definition: Any) -> None:
    text = api_doc()
    section = text.split(f"\n## {definition.kind}\n", 1)[1].split("\n## ", 1)[0]
    for part, model in (("spec", definition.spec_model), ("status", definition.status_model)):
        for path in _aliases(model, part):
            assert f"| `{path}`" in section, path


def test_a_changed_description_is_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "api.md"
    stale.write_text(COMMITTED.read_text().replace("Average context length", "Mean context", 1))
    crds = REPO / "deploy" / "crds"
    assert main(["--check", "--dir", str(crds), "--api-doc", str(stale)]) == 1
    captured = capsys.readouterr()
    assert "+| `spec.workload.averageContextTokens` **required**" in captured.out
    assert "is stale" in captured.err
    assert main(["--write", "--dir", str(tmp_path / "crds"), "--api-doc", str(stale)]) == 0
    assert main(["--check", "--dir", str(tmp_path / "crds"), "--api-doc", str(stale)]) == 0


def test_tables_are_well_formed() -> None:
    for line in api_doc().splitlines():
        if line.startswith("| `"):
            cells = line.replace("\\|", "").split("|")
            assert len(cells) == 5, line  # 3 cells between 4 pipes
