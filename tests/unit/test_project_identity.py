"""One project home and one maintainer address, set in the chart's Chart.yaml: every place
that names them agrees with it, and no placeholder is left in the project's identity."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = yaml.safe_load((REPO / "charts" / "kvtier-operator" / "Chart.yaml").read_text())
HOME: str = CHART["home"]
CSV_PATH = REPO / "bundle" / "manifests" / "kvtier-operator.clusterserviceversion.yaml"
PLACEHOLDER = re.compile(
    r"example\.(com|org|net)|placeholder|changeme|your[-_]?org|TODO", re.IGNORECASE
)
# The files that say who the project is and where it lives.
IDENTITY_FILES = (
    "README.md",
    "pyproject.toml",
    "charts/kvtier-operator/Chart.yaml",
    "deploy/argocd/application.yaml",
    "docs/packaging.md",
    "Containerfile",
)


def csv() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CSV_PATH.read_text())
    return doc


def test_home_is_one_github_repository() -> None:
    assert re.fullmatch(r"https://github\.com/kvtier/kvtier", HOME), HOME
    assert CHART["sources"] == [HOME]
    assert CHART["icon"].startswith(HOME.replace("github.com", "raw.githubusercontent.com"))


def test_pyproject_names_the_same_home_and_maintainers() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["urls"]["Homepage"] == HOME
    assert all(url.startswith(f"{HOME}/") for k, url in project["urls"].items() if k != "Homepage")
    assert project["maintainers"] == [
        {"name": m["name"], "email": m["email"]} for m in CHART["maintainers"]
    ]


def test_bundle_and_argocd_name_the_same_home_and_maintainers() -> None:
    doc = csv()
    assert doc["metadata"]["annotations"]["repository"] == HOME
    assert doc["spec"]["links"] == [{"name": "Source", "url": HOME}]
    assert doc["spec"]["maintainers"] == [
        {"name": m["name"], "email": m["email"]} for m in CHART["maintainers"]
    ]
    apps = list(yaml.safe_load_all((REPO / "deploy" / "argocd" / "application.yaml").read_text()))
    urls = {a["spec"]["source"]["repoURL"] for a in apps if a}
    assert urls == {f"{HOME}.git"}


def test_every_link_to_the_project_uses_the_home() -> None:
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    owner = HOME.rsplit("/", 2)[-2]
    pattern = re.compile(rf"https://(?:raw\.githubusercontent\.com|github\.com)/{owner}/[\w.-]+")
    wrong = set()
    for name in files:
        path = REPO / name
        if not path.is_file() or path.suffix in (".png", ".svg", ".gz"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for url in pattern.findall(text):
            if url.rstrip(".") not in (HOME, f"{HOME}.git") and not url.startswith(
                HOME.replace("github.com", "raw.githubusercontent.com")
            ):
                wrong.add(f"{name}: {url}")
    assert not wrong, sorted(wrong)


def test_no_placeholder_in_the_projects_identity() -> None:
    for name in IDENTITY_FILES:
        found = PLACEHOLDER.findall((REPO / name).read_text(encoding="utf-8"))
        assert not found, f"{name}: {found}"
    doc = csv()
    identity = {k: v for k, v in doc["metadata"]["annotations"].items() if k != "alm-examples"}
    identity |= {k: doc["spec"][k] for k in ("maintainers", "links", "provider", "description")}
    assert not PLACEHOLDER.search(str(identity)), identity
    for m in CHART["maintainers"]:
        assert re.fullmatch(r"[\w.+-]+@[\w-]+(\.[\w-]+)+", m["email"]), m
