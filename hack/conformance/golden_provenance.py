"""What a golden file of `make conformance` was made from, in a form `make test` can check.

Standard library only: the harnesses import it inside a vLLM virtualenv, and
tests/unit/test_golden_provenance.py imports it in the repository's own environment.

`make conformance` writes three golden files per vLLM release, each by its own harness
(`GOLDEN_FILES`): tests/fixtures/vllm/ (harness.py), tests/fixtures/vllm-metrics/ (metrics.py)
and tests/fixtures/vllm-fs/ (fs_layout.py). `seal()` adds to each file's `provenance`:

- `harnessSources`: every file whose content decides what that harness writes (its code, what
  it imports from this directory, the model configs it hands to vLLM), each with its sha256. A
  test fails when one of them changed and the golden file was not regenerated (`make
  conformance CONFORMANCE_WRITE=1`).
- `bodySha256`: a hash of everything in the golden file except its provenance, in canonical
  JSON, so a hand-edited figure fails the test while the file's formatting does not matter.
- `vllmWheel`: the vLLM wheel pip installed into the virtualenv, by name and sha256, read from the
  install report `pip install --report` wrote (hack/conformance/run).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# Repository-relative patterns, per golden directory under tests/fixtures/. `run` and this
# module decide every file's provenance; harness.py's inputs are also metrics.py's, which
# imports it.
_COMMON = ("hack/conformance/run", "hack/conformance/golden_provenance.py")
_HARNESS = (
    *_COMMON,
    "hack/conformance/harness.py",
    "hack/conformance/nemotron_nas_config.py",
    "tests/fixtures/configs/*.json",
)
GOLDEN_FILES: dict[str, tuple[str, ...]] = {
    "vllm": _HARNESS,
    "vllm-metrics": (*_HARNESS, "hack/conformance/metrics.py"),
    "vllm-fs": (*_COMMON, "hack/conformance/fs_layout.py"),
}


def harness_sources(repo: Path, golden: str) -> dict[str, str]:
    """{repository-relative path: sha256 of its bytes} for the sources of one golden directory."""
    files: set[Path] = set()
    for pattern in GOLDEN_FILES[golden]:
        matched = sorted(repo.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"no harness source matches {pattern!r} under {repo}")
        files.update(matched)
    return {
        path.relative_to(repo).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(files)
    }


def combined_sha256(files: dict[str, str]) -> str:
    """One hash over the sources: each path with its content hash, in path order."""
    lines = "".join(f"{path}\0{digest}\n" for path, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def body_sha256(document: dict[str, Any]) -> str:
    """sha256 of the document without `provenance`, as canonical JSON (sorted keys, no spaces)."""
    body = {key: value for key, value in document.items() if key != "provenance"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def wheel(report_path: Path, package: str) -> dict[str, str]:
    """{"name": wheel file name, "sha256": ...} of `package` in a pip install report."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    for item in report.get("install", []):
        if item.get("metadata", {}).get("name", "").lower() != package:
            continue
        info = item["download_info"]
        name = info["url"].rsplit("/", 1)[-1].split("#", 1)[0]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not digest or not name.endswith(".whl"):
            raise ValueError(f"{report_path}: {package} was not installed from a wheel with a hash")
        return {"name": name, "sha256": digest}
    raise ValueError(f"{report_path}: {package} is not in the install report")


def seal(document: dict[str, Any], repo: Path, golden: str, install_report: Path) -> None:
    """Record in `document["provenance"]` what it was made from; call once the body is complete."""
    sources = harness_sources(repo, golden)
    provenance = document["provenance"]
    provenance["vllmWheel"] = wheel(install_report, "vllm")
    provenance["harnessSources"] = {"sha256": combined_sha256(sources), "files": sources}
    provenance["bodySha256"] = body_sha256(document)
