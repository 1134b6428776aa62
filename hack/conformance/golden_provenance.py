"""What a vLLM golden file was made from, in a form `make test` can check without vLLM.

Standard library only: the harness imports it inside a vLLM virtualenv, and
tests/unit/test_vllm_conformance.py imports it in the repository's own environment.

- `harness_sources`: every file whose content decides what the harness writes (its code, the
  nemotron-nas stand-in, the model configs it hands to vLLM), each with its sha256. A test fails
  when one of them changed and the golden files were not regenerated (`make conformance
  CONFORMANCE_WRITE=1`).
- `body_sha256`: a hash of everything in the golden file except its provenance, in canonical
  JSON, so a hand-edited figure fails the test while the file's formatting does not matter.
- `wheel`: the vLLM wheel pip installed into the virtualenv, by name and sha256, read from the
  install report `pip install --report` wrote (hack/conformance/run).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# Repository-relative patterns; the model configs are the harness's input.
HARNESS_SOURCE_PATTERNS = (
    "hack/conformance/run",
    "hack/conformance/harness.py",
    "hack/conformance/golden_provenance.py",
    "hack/conformance/nemotron_nas_config.py",
    "tests/fixtures/configs/*.json",
)


def harness_sources(repo: Path) -> dict[str, str]:
    """{repository-relative path: sha256 of its bytes} for every harness source, sorted."""
    files: set[Path] = set()
    for pattern in HARNESS_SOURCE_PATTERNS:
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
