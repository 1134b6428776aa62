"""The operator image recipe: it parses, installs the wheel the tests build, and that wheel's
entry point runs (in a fresh venv, since no container engine is available here)."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "Containerfile"
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword, args.strip()))
    assert not pending, "dangling line continuation"
    return out


@pytest.fixture(scope="module")
def parsed() -> list[tuple[str, str]]:
    return instructions(CONTAINERFILE.read_text())


def test_containerfile_parses(parsed: list[tuple[str, str]]) -> None:
    assert parsed[0][0] == "FROM"
    for keyword, args in parsed:
        assert keyword in INSTRUCTIONS, keyword
        assert args, keyword
    assert parsed[0][1].startswith("registry.access.redhat.com/ubi9/python-311")


def test_image_shape(parsed: list[tuple[str, str]]) -> None:
    runs = " ".join(a for k, a in parsed if k == "RUN")
    assert "install" in runs and " fio" in runs
    users = [a for k, a in parsed if k == "USER"]
    assert users[-1].isdigit() and int(users[-1]) != 0, "the image must end as non-root"
    entrypoint = next(a for k, a in parsed if k == "ENTRYPOINT")
    assert json.loads(entrypoint) == ["kvtier", "operator"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel the Containerfile installs, built from a copy of the sources."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "operator" / "kvtier",
        src / "operator" / "kvtier",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(dist)],
        check=True,
        timeout=120,
    )
    (built,) = dist.glob("*.whl")
    return built


def test_copy_matches_the_wheel(parsed: list[tuple[str, str]], wheel: Path) -> None:
    source = next(a for k, a in parsed if k == "COPY").split()[0]
    assert fnmatch.fnmatch(f"dist/{wheel.name}", source), (source, wheel.name)
    ignore = (REPO / ".containerignore").read_text()
    assert f"!{source}" in ignore


def test_entrypoint_runs_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         str(wheel)],
        check=True,
        timeout=120,
    )  # fmt: skip
    # Dependencies come from the test environment; kvtier itself only from the wheel.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [str(python), "-c", "import kvtier; print(kvtier.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(venv)), where
    kvtier = venv / "bin" / "kvtier"
    top = subprocess.run([str(kvtier), "--help"], capture_output=True, text=True, check=True)
    assert "operator" in top.stdout
    op = subprocess.run(
        [str(kvtier), "operator", "--help"], capture_output=True, text=True, check=True
    )
    for flag in ("--metrics-port", "--health-port", "--bind-address"):
        assert flag in op.stdout
