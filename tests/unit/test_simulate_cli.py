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


def test_another_model_gets_its_own_auto_cpu_tier(capsys: pytest.CaptureFixture[str]) -> None:
    # The study preset's 128 GiB is Nemotron's; Llama 3.1 70B at 24 sessions is sized afresh:
    # the working set, 24 × 50,000 tokens × 327,680 B, fits a 2 TiB node's cap.
    argv = ["--model", "llama-3.1-70b", "--params", "70.6e9", "--tp", "4", "--sessions", "24"]
    assert main(["simulate", *SHORT, *argv, "-o", "json"]) == 0
    derived = json.loads(capsys.readouterr().out)["derived"]
    assert derived["bytesPerToken"] == 327_680
    assert derived["cpuBytesToUse"] >= 24 * 50_000 * 327_680


def test_a_short_context_shrinks_the_default_system_prompt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--model", "llama-3.1-8b", "--params", "8e9", "--tp", "1", "--context", "8000"]
    assert main(["simulate", *SHORT, *argv, "-o", "json"]) == 0
    workload = json.loads(capsys.readouterr().out)["workload"]
    assert workload["systemPromptTokens"] == 2_400  # half of the 4,800-token first turn


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
        (["--weight-bytes", "0"], "--weight-bytes"),
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
        "heavy = ('simpy', 'kvtier.simulate', 'kvtier.cli.simulate'); "
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "simulate" in run.stderr + run.stdout
    assert run.stdout.strip().splitlines()[-1] == "[]"
