"""`kvtier simulate`: table, JSON, plot, one-line errors, and a lazy `kvtier --help`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.cli import main

SHORT = ["--duration", "900", "--warmup", "100"]


def test_json_has_every_scenario_with_ratios_against_tiers_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", *SHORT, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["scenario"] for s in doc["scenarios"]] == ["none", "cpu", "cpu+disk"]
    assert doc["scenarios"][0]["throughputRatio"] == 1.0
    assert doc["scenarios"][2]["throughputRatio"] > doc["scenarios"][1]["throughputRatio"] > 1
    assert doc["derived"]["bytesPerToken"] == 262_144
    assert set(doc["scenarios"][2]["hitRatios"]) == {"gpu", "cpu", "disk", "recompute"}


def test_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "sim.png"
    assert main(["simulate", *SHORT, "--disk", "cephfs", "--plot", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "cpu+disk" in out and "CephFS" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_disk_runs_two_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SHORT, "--disk", "none", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["scenario"] for s in doc["scenarios"]] == ["none", "cpu"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sessions", "0"], "--sessions: must be greater than zero"),
        (["--model", "llama-3.1-70b"], "--params: give the parameter count"),
        (["--disk", "floppy"], "--disk"),
        (["--tier-bandwidth", "fast"], "--tier-bandwidth"),
        (["--params", "lots"], "--params: 'lots' is not a number"),
        (["--plot", "chart.gif"], "--plot"),
        (["--params", "3e12"], "--params"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *SHORT, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_help_does_not_import_the_simulator() -> None:
    code = (
        "import sys; from kvtier.cli import main; main(['--help']); "
        "print(sorted(m for m in sys.modules if m.startswith(('simpy', 'kvtier.simulate'))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "simulate" in run.stderr + run.stdout
    assert run.stdout.strip().splitlines()[-1] == "[]"
