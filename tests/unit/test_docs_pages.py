"""The docs pages exist, README links them, and docs/upgrade.md names real identifiers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvtier.names import FINALIZER
from kvtier.names.records import APPLIED_ANNOTATION

REPO = Path(__file__).resolve().parents[2]
PAGES = ("api.md", "sizing.md", "troubleshooting.md", "upgrade.md", "nvme.md")


@pytest.mark.parametrize("page", PAGES)
def test_page_exists_and_readme_links_it(page: str) -> None:
    assert (REPO / "docs" / page).is_file()
    assert f"(docs/{page})" in (REPO / "README.md").read_text(encoding="utf-8")


def test_upgrade_names_the_finalizer_and_the_applied_record() -> None:
    text = (REPO / "docs" / "upgrade.md").read_text(encoding="utf-8")
    assert f"`{FINALIZER}`" in text and f"`{APPLIED_ANNOTATION}`" in text
    strategy = re.search(
        r"strategy:\s*\n\s+type:\s*(\w+)",
        (REPO / "charts/kvtier-operator/templates/deployment.yaml").read_text(),
    )
    assert strategy is not None and f"`{strategy[1]}` strategy" in text


def test_relative_links_in_docs_resolve() -> None:
    for page in (REPO / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).is_file(), (page.name, target)
