"""Bad files never give a traceback: every option that reads or writes a file says in one line
what is wrong with it, names the option and exits non-zero."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.textfile import MAX_BYTES

PLAN = ["plan", "--model", "llama-3.1-70b", "--tp", "8", "--context", "128Ki"]
PLOTTABLE = [*PLAN, "--ttft", "60", "--tier-p99", "nvme=0.05", "-o", "json"]


def _binary(p: Path) -> Path:
    p.write_bytes(bytes(range(256)) * 8)
    return p


def _latin1(p: Path) -> Path:
    p.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    return p


def _nul(p: Path) -> Path:
    p.write_bytes(b'{"a": 1}\x00\x00')
    return p


def _empty(p: Path) -> Path:
    p.write_bytes(b"")
    return p


def _blank(p: Path) -> Path:
    p.write_text("  \n\n")
    return p


def _directory(p: Path) -> Path:
    p.mkdir()
    return p


def _huge(p: Path) -> Path:
    with p.open("wb") as out:  # sparse: no disk used, but stat says 3 GiB
        out.truncate(3 * 2**30)
    return p


def _missing(p: Path) -> Path:
    return p


def _text(p: Path) -> Path:
    p.write_text("hello\nthis is not JSON\n")
    return p


BAD_FILES: dict[str, Callable[[Path], Path]] = {
    "binary": _binary,
    "latin-1": _latin1,
    "nul": _nul,
    "empty": _empty,
    "blank": _blank,
    "directory": _directory,
    "huge": _huge,
    "missing": _missing,
    "text": _text,
}
READERS: dict[str, Callable[[str], list[str]]] = {
    "--config": lambda f: ["plan", "--config", f, "--context", "1000"],
    "--probe-result": lambda f: [*PLAN, "--probe-result", f"nvme={f}"],
    "--probe-result ": lambda f: [*PLAN, "--disk", "nvme", "--probe-result", f],
    "--kubeconfig": lambda f: ["operator", "--kubeconfig", f],
    "--metrics-cert-file": lambda f: [
        "operator",
        "--metrics-cert-file",
        f,
        "--metrics-key-file",
        f,
    ],
}


def _one_line_error(capsys: pytest.CaptureFixture[str], option: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("kvtier: error:"), err
    assert option.strip() in err, err
    return err


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize("option", READERS)
def test_bad_input_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, kind: str
) -> None:
    path = BAD_FILES[kind](tmp_path / "input.json")
    assert main(READERS[option](str(path))) != 0
    err = _one_line_error(capsys, option)
    if kind in ("binary", "latin-1"):
        assert "not UTF-8" in err
    if kind == "huge":
        assert f"{MAX_BYTES:,}" in err


def test_huge_file_is_not_read(tmp_path: Path) -> None:
    """In a real process, within seconds: the size is checked before reading."""
    path = _huge(tmp_path / "config.json")
    run = subprocess.run(
        [sys.executable, "-m", "kvtier", "plan", "--config", str(path), "--context", "1000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--config" in run.stderr and "bytes" in run.stderr


def _unwritable_dir(tmp_path: Path) -> Path:
    return tmp_path / "no" / "such" / "dir"


WRITE_TARGETS: dict[str, Callable[[Path], str]] = {
    "missing dir": lambda t: str(_unwritable_dir(t) / "out.png"),
    "a directory": lambda t: str(_directory(t / "out.png")),
    "dev-full": lambda t: "/dev/full" if os.path.exists("/dev/full") else str(t / "x" / "y.png"),
}


@pytest.mark.parametrize("target", WRITE_TARGETS)
def test_plot_to_an_unwritable_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str
) -> None:
    path = WRITE_TARGETS[target](tmp_path)
    if target == "dev-full":  # /dev/full has no .png suffix: give it one via a symlink
        link = tmp_path / "full.png"
        link.symlink_to(path)
        path = str(link)
    assert main([*PLOTTABLE, "--plot", path]) != 0
    _one_line_error(capsys, "--plot")


@pytest.mark.parametrize("target", ["missing dir", "a directory"])
def test_probe_termination_log_unwritable_fails_before_fio(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str
) -> None:
    log = WRITE_TARGETS[target](tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    argv = ["probe", "--dir", str(work), "--block-bytes", "1Mi", "--termination-log", log]
    assert main(argv) == 2  # bad input, found before any fio run
    _one_line_error(capsys, "--termination-log")


@pytest.mark.parametrize("kind", ["binary", "empty", "missing"])
def test_probe_dir_that_is_not_a_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    path = BAD_FILES[kind](tmp_path / "dir")
    assert main(["probe", "--dir", str(path), "--block-bytes", "1Mi", "-o", "text"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and str(path) in err


def test_not_a_probe_result_says_so_without_echoing_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    readme = tmp_path / "notes.md"
    readme.write_text("# My notes\n\nsecret line that must not be echoed\n")
    assert main([*PLAN, "--probe-result", f"nvme={readme}"]) == 2
    err = _one_line_error(capsys, "--probe-result")
    assert "not a `kvtier probe` result" in err and "secret line" not in err
    other = tmp_path / "other.json"
    other.write_text('{"apiVersion": "v1", "kind": "ConfigMap"}')
    assert main([*PLAN, "--probe-result", f"nvme={other}"]) == 2
    assert "not a `kvtier probe` result" in _one_line_error(capsys, "--probe-result")


def test_kubeconfig_that_is_not_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("a: [\n")
    assert main(["operator", "--kubeconfig", str(bad)]) == 2
    assert "is not YAML" in _one_line_error(capsys, "--kubeconfig")
    bad.write_text("apiVersion: v1\nkind: Config\n")
    assert main(["operator", "--kubeconfig", str(bad)]) == 2
    assert "no clusters" in _one_line_error(capsys, "--kubeconfig")


class _ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no fd")


def test_broken_pipe_is_quiet(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["models", "-o", "json"]) == 141
    assert capsys.readouterr().err == ""


def test_an_unexpected_error_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvtier.cli.plan

    def boom(args: object) -> int:
        raise RuntimeError("something kvtier did not foresee")

    monkeypatch.setattr(kvtier.cli.plan, "run_models", boom)
    monkeypatch.delenv("KVTIER_TRACEBACK", raising=False)
    assert main(["models"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: RuntimeError" in err
    assert "KVTIER_TRACEBACK=1" in err
