"""`kvtier probe` on the command line (fio really runs), and `kvtier plan --probe-result`."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kvtier.cli.probe as cli_probe
from kvtier.cli import main
from kvtier.probe import filesystem_type
from kvtier.probe.fio_runner import MEMORY_FILESYSTEMS

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "fio"
QUICK = ["--runtime", "1", "--numjobs", "2", "--size", "8Mi"]


@pytest.fixture
def disk_dir(tmp_path: Path) -> Path:
    """tmp_path when it is on a disk, else a scratch directory under the ignored build/."""
    mountinfo = Path("/proc/self/mountinfo").read_text()
    if filesystem_type(os.path.realpath(tmp_path), mountinfo) not in MEMORY_FILESYSTEMS:
        return tmp_path
    scratch = REPO / "build" / "test-cli-probe" / tmp_path.name
    scratch.mkdir(parents=True, exist_ok=True)
    return scratch


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A private directory on /dev/shm (tmpfs), so concurrent test runs never meet."""
    directory = Path(tempfile.mkdtemp(prefix="kvtier-test-", dir="/dev/shm"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_kubelet_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Never write the real /dev/termination-log from a test.
    monkeypatch.setattr(cli_probe, "DEFAULT_TERMINATION_LOG", str(tmp_path / "absent"))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["probe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_probe_prints_one_json_line_and_writes_the_termination_log(
    capsys: pytest.CaptureFixture[str], disk_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "termination-log"
    tier = disk_dir / "tier"
    tier.mkdir()
    code, out, err = _run(
        capsys,
        "--dir",
        str(tier),
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        *QUICK,
        "--termination-log",
        str(log),
        "-o",
        "json",
    )
    assert (code, err) == (0, "")
    assert out.count("\n") == 1 and len(out.encode()) < 4096
    doc = json.loads(out)
    assert doc["blockBytes"] == 5_242_880  # 16 tokens × 327,680 B, derived via kvtier.sizing
    assert doc["numjobs"] == 2 and doc["buffered"] is False
    assert doc["p99Seconds"] >= doc["p50Seconds"] > 0
    assert log.read_text() == out.strip()
    assert os.listdir(tier) == []


def test_default_termination_log_only_when_it_exists(
    capsys: pytest.CaptureFixture[str],
    disk_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "kubelet-log"
    log.touch()
    monkeypatch.setattr(cli_probe, "DEFAULT_TERMINATION_LOG", str(log))
    code, out, _ = _run(capsys, "--dir", str(disk_dir), "--block-bytes", "1Mi", *QUICK)
    assert code == 0 and json.loads(log.read_text()) == json.loads(out)


def test_tmpfs_fails_clearly_then_allow_buffered_succeeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, shm_dir: Path
) -> None:
    log = tmp_path / "log"
    args = ["--dir", str(shm_dir), "--block-bytes", "1Mi", *QUICK, "--termination-log", str(log)]
    code, out, err = _run(capsys, *args)
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "tmpfs" in err and "--allow-buffered" in err
    assert json.loads(log.read_text())["exitCode"] == 3

    code, out, err = _run(capsys, *args, "--allow-buffered")
    assert (code, err) == (0, "")
    assert json.loads(out)["buffered"] is True


def test_text_output(capsys: pytest.CaptureFixture[str], shm_dir: Path) -> None:
    code, out, _ = _run(
        capsys,
        "--dir",
        str(shm_dir),
        "--block-bytes",
        "1Mi",
        *QUICK,
        "--allow-buffered",
        "-o",
        "text",
    )
    assert code == 0 and out.startswith("read p50 ") and "buffered I/O" in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--dir", "/tmp"], 2, "one of the arguments --block-bytes --model is required"),
        (["--dir", "/tmp", "--block-bytes", "lots"], 2, "--block-bytes"),
        (["--dir", "/tmp", "--block-bytes", "1Mi", "--model", "x"], 2, "not allowed with"),
        (["--dir", "/tmp", "--block-bytes", "1Mi", "--numjobs", "0"], 2, "greater than zero"),
        (["--dir", "/tmp", "--block-bytes", "1Mi", "--runtime", "1.5"], 2, "whole number"),
        (["--dir", "/tmp", "--block-bytes", "1Mi", "--size", "-1"], 2, "--size"),
        (["--dir", "/tmp", "--model", "no-such-model"], 2, "unknown model"),
        (["--dir", "/nonexistent/kv", "--block-bytes", "1Mi"], 3, "does not exist"),
        (["--dir", "/proc", "--block-bytes", "1Mi"], 3, "not writable"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    got, out, err = _run(capsys, *argv)
    assert got == code and out == ""
    assert err.startswith("kvtier: error: probe: ") and err.count("\n") == 1 and message in err


def test_fio_missing_in_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "kvtier", "probe", "--dir", str(tmp_path), "--block-bytes", "1Mi"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "fio not found" in done.stderr
    assert "Traceback" not in done.stderr


# --- kvtier plan --probe-result -------------------------------------------------------------

PLAN = ["plan", "--model", "llama-3.1-70b", "--tp", "8", "--context", "128Ki", "--ttft", "60"]
SPILLS = ["--sessions", "8", "--cpu", "64G"]  # 320 GiB working set: NVMe on one replica


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*PLAN, *argv, "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return {t["name"]: t for t in doc["tiers"]}


def test_plan_takes_p99_and_bandwidth_from_a_probe_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = json.loads((FIXTURES / "kvtier-probe-real.json").read_text())
    bare = _plan(capsys, *SPILLS, "--probe-result", str(FIXTURES / "kvtier-probe-real.json"))
    assert bare["NVMe"]["selected"]
    assert bare["NVMe"]["p99Seconds"] == result["p99Seconds"]
    assert bare["NVMe"]["bandwidthBytesPerSecond"] == result["bandwidthBytesPerSecond"]
    assert bare["NVMe"]["beneficial"] is not None and bare["CephFS"]["p99Seconds"] is None

    named = _plan(capsys, "--probe-result", f"cephfs={FIXTURES / 'kvtier-probe-real.json'}")
    assert named["CephFS"]["p99Seconds"] == result["p99Seconds"]


def test_plan_reads_fios_own_report_and_flags_win(capsys: pytest.CaptureFixture[str]) -> None:
    report = FIXTURES / "randrw-75-real.json"
    tiers = _plan(capsys, "--probe-result", f"nvme={report}", "--tier-p99", "nvme=0.5", *SPILLS)
    assert tiers["NVMe"]["p99Seconds"] == 0.5
    raw = json.loads(report.read_text())["jobs"][0]["read"]
    assert tiers["NVMe"]["bandwidthBytesPerSecond"] == raw["bw_bytes"]


def test_plan_warns_about_buffered_results(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    result = json.loads((FIXTURES / "kvtier-probe-real.json").read_text())
    path = tmp_path / "buffered.json"
    path.write_text(json.dumps({**result, "buffered": True}))
    assert main([*PLAN, "--probe-result", f"nvme={path}", "-o", "json"]) == 0
    assert "buffered I/O" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("missing.json", "cannot read missing.json"),
        ("nvme=missing.json", "cannot read missing.json"),
        ("GARBAGE", "GARBAGE: not a `kvtier probe` result"),
        ("ERROR", "probe failed: fio not found"),
    ],
)
def test_plan_probe_result_errors(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    item: str,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("GARBAGE").write_text("not json\n")
    Path("ERROR").write_text('{"error": "fio not found", "exitCode": 3}')
    assert main([*PLAN, "--disk", "nvme", "--probe-result", item]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_plan_bare_probe_result_needs_a_disk_tier(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*PLAN, "--disk", "none", "--probe-result", str(FIXTURES / "kvtier-probe-real.json")]
    assert main(argv) == 2
    assert "no disk tier is selected" in capsys.readouterr().err
