"""Every golden file `make conformance` writes is what its harness wrote from today's sources.

hack/conformance/run writes three golden files per vLLM release, each by its own harness:
tests/fixtures/vllm/ (harness.py), tests/fixtures/vllm-metrics/ (metrics.py) and
tests/fixtures/vllm-fs/ (fs_layout.py). Each file's provenance names the vLLM wheel and hashes
the harness's sources and the file's own body (hack/conformance/golden_provenance.py), so a
harness changed without regenerating, or a hand-edited figure, fails here; no vLLM needed.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).parent.parent.parent
CONFORMANCE = REPO / "hack" / "conformance"
sys.path.insert(0, str(CONFORMANCE))
import golden_provenance  # noqa: E402  (standard library only; shared with the harnesses)

FIXTURES = REPO / "tests" / "fixtures"
GOLDEN = [
    (golden, path)
    for golden in golden_provenance.GOLDEN_FILES
    for path in sorted((FIXTURES / golden).glob("*.json"))
]
IDS = [f"{golden}/{path.stem}" for golden, path in GOLDEN]
REGENERATE = "run `make conformance CONFORMANCE_WRITE=1`"


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def _releases(golden: str) -> list[str]:
    return sorted(p.stem for p in (FIXTURES / golden).glob("*.json"))


def test_every_release_has_every_golden_file() -> None:
    """Never pass vacuously: each pinned release has all three golden files, and there is one."""
    releases = {golden: _releases(golden) for golden in golden_provenance.GOLDEN_FILES}
    assert releases["vllm"], f"no golden files in tests/fixtures/vllm: {REGENERATE}"
    assert all(found == releases["vllm"] for found in releases.values()), releases


@pytest.mark.parametrize("golden,path", GOLDEN, ids=IDS)
def test_provenance_names_the_wheel(golden: str, path: Path) -> None:
    """The golden file names the vLLM wheel it was made with, and that wheel's sha256."""
    provenance = _load(path)["provenance"]
    assert provenance["vllm"] == path.stem
    wheel = provenance["vllmWheel"]
    assert wheel["name"].startswith(f"vllm-{path.stem}-") and wheel["name"].endswith(".whl")
    assert re.fullmatch("[0-9a-f]{64}", wheel["sha256"]), wheel


@pytest.mark.parametrize("release", _releases("vllm"))
def test_a_releases_golden_files_name_the_same_wheel(release: str) -> None:
    """One virtualenv made all of a release's golden files: the same wheel, by name and hash."""
    wheels = {
        golden: _load(FIXTURES / golden / f"{release}.json")["provenance"]["vllmWheel"]
        for golden in golden_provenance.GOLDEN_FILES
    }
    assert len({json.dumps(w, sort_keys=True) for w in wheels.values()}) == 1, wheels


@pytest.mark.parametrize("golden,path", GOLDEN, ids=IDS)
def test_harness_sources_unchanged_since_the_golden_file(golden: str, path: Path) -> None:
    """Each source of its harness hashes as when the file was written (else regenerate)."""
    recorded = _load(path)["provenance"]["harnessSources"]
    today = golden_provenance.harness_sources(REPO, golden)
    changed = sorted(
        f for f in set(today) | set(recorded["files"]) if today.get(f) != recorded["files"].get(f)
    )
    assert not changed, (
        f"harness sources changed since {golden}/{path.name}: {changed}; {REGENERATE}"
    )
    assert recorded["sha256"] == golden_provenance.combined_sha256(today)


@pytest.mark.parametrize("golden,path", GOLDEN, ids=IDS)
def test_body_is_what_the_harness_wrote(golden: str, path: Path) -> None:
    """The body (all but the provenance) hashes exactly as the harness recorded: no hand edits."""
    doc = _load(path)
    assert set(doc) - {"provenance", "vllm"}, "a golden file with nothing in it"
    assert doc["provenance"]["bodySha256"] == golden_provenance.body_sha256(doc), (
        f"{golden}/{path.name} was edited after its harness wrote it; {REGENERATE}"
    )


def _local_imports(path: Path) -> set[str]:
    """The modules of hack/conformance/ a harness source imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
    }
    return {name for name in names if (CONFORMANCE / f"{name}.py").is_file()}


@pytest.mark.parametrize("golden", golden_provenance.GOLDEN_FILES)
def test_harness_sources_include_what_they_import(golden: str) -> None:
    """A module a harness imports from hack/conformance/ is one of its hashed sources too."""
    sources = golden_provenance.harness_sources(REPO, golden)
    missing = {
        f"hack/conformance/{name}.py"
        for source in sources
        if source.endswith(".py")
        for name in _local_imports(REPO / source)
    } - set(sources)
    assert not missing, f"{golden}: imported but not hashed: {sorted(missing)}"


@pytest.mark.parametrize("golden,path", GOLDEN, ids=IDS)
def test_the_harness_its_command_names_is_hashed(golden: str, path: Path) -> None:
    """The script the provenance says wrote the file is among the sources hashed for it."""
    provenance = _load(path)["provenance"]
    named = set(re.findall(r"hack/conformance/[\w.]+\.py", provenance["command"]))
    assert named, provenance["command"]
    assert named <= set(provenance["harnessSources"]["files"]), provenance["command"]
