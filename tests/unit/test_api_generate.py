"""`python -m kvtier.api.generate` writes deterministic CRDs and detects drift."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvtier.api.generate import check, generated_files, main, write

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "deploy" / "crds"
FILES = {"kvcache.io_kvcachetiers.yaml", "kvcache.io_kvcachepolicies.yaml"}


def test_generated_file_names() -> None:
    assert set(generated_files()) == FILES


def test_output_is_deterministic() -> None:
    assert generated_files() == generated_files()


def test_committed_crds_are_up_to_date() -> None:
    assert check(COMMITTED) == [], "run `python -m kvtier.api.generate --write`"


def test_generated_files_are_valid_crds() -> None:
    for content in generated_files().values():
        (document,) = list(yaml.safe_load_all(content))
        assert document["kind"] == "CustomResourceDefinition"


def test_write_then_check_round_trip(tmp_path: Path) -> None:
    assert main(["--write", "--dir", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == FILES
    assert main(["--check", "--dir", str(tmp_path)]) == 0


def test_check_fails_with_a_diff_after_a_modification(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(COMMITTED, crds)
    target = crds / "kvcache.io_kvcachetiers.yaml"
    target.write_text(target.read_text().replace("maxItems: 32", "maxItems: 33", 1))
    assert main(["--check", "--dir", str(crds)]) == 1
    out = capsys.readouterr().out
    assert "-                maxItems: 33" in out or "maxItems: 33" in out
    assert "(generated)" in out


def test_check_fails_when_a_file_is_missing(tmp_path: Path) -> None:
    write(tmp_path)
    (tmp_path / "kvcache.io_kvcachepolicies.yaml").unlink()
    assert main(["--check", "--dir", str(tmp_path)]) == 1


def test_module_entry_point_checks_committed_files() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kvtier.api.generate", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
