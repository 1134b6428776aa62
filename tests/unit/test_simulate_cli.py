"""`kvtier simulate`: table, JSON, plot, one-line errors, and a lazy `kvtier --help`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        (["--model", "llama-3.1-405b"], "--params: give the parameter count"),
        (["--disk", "floppy"], "--disk"),
        (["--tier-bandwidth", "fast"], "--tier-bandwidth"),
        (["--params", "lots"], "--params: 'lots' is not a number"),
        (["--plot", "chart.gif"], "--plot"),
        (["--params", "3e12"], "--params"),
        (["--weight-bytes", "0"], "--weight-bytes"),
        (["--output-tokens", "0"], "--output-tokens: must be a whole number above zero, got 0"),
        (["--output-tokens", "lots"], "--output-tokens: 'lots' is not a token count"),
        (["--system-prompt", "-5"], "--system-prompt: must be a whole number, zero or more"),
        (["--think", "-1"], "--think: must be zero or more, got -1"),
        (["--warmup", "-1"], "--warmup: must be zero or more, got -1"),
        (["--warmup", "900"], "--warmup: must be zero or more and below the duration"),
        (["--cpu", "-1Gi"], "--cpu: must be greater than zero, got -1Gi"),
        (["--cpu", "lots"], "--cpu: 'lots' is not a size such as 64Gi, 64GiB or 100GB"),
        (["--disk", "none", "--tier-bandwidth", "0"], "--tier-bandwidth: sets the disk tier"),
        (["--disk", "none", "--tier-p99", "0.01"], "--tier-p99: sets the disk tier"),
        (["--tier-bandwidth", "0"], "--tier-bandwidth: must be greater than zero"),
        (["--context", "200000"], "--context: sessions grow to 1.4 × the average"),
        (["--duration", "1e12"], "--duration: must be at most 604,800 s (a week)"),
        (["--timeout", "0"], "--timeout: must be above zero"),
        (["--rate", "5", "--sessions", "4"], "--sessions: an agentic-session flag, but --rate"),
        (["--rate", "5", "--concurrency", "4"], "--concurrency: give --rate (open loop) or"),
        (["--rate", "0"], "--rate: must be above zero, got 0"),
        (["--trace", "t.jsonl", "--groups", "3"], "--groups: does not apply to --trace"),
        (["--trace", "no-such.jsonl"], "--trace: no-such.jsonl: No such file"),
        (["--router-weights", "1,2"], "--router-weights: give three weights"),
        (["--router-weights", "1,2,-3"], "--router-weights: must be zero or more"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization: must be at most 1"),
        (["--lru-capacity-per-server", "0"], "--lru-capacity-per-server: must be a whole"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *SHORT, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def _json(capsys: pytest.CaptureFixture[str], *argv: str, short: bool = True) -> dict[str, Any]:
    assert main(["simulate", *(SHORT if short else []), *argv, "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_zero_is_accepted_where_the_model_accepts_it(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, "--warmup", "0", "--system-prompt", "0", "--think", "0")
    assert doc["warmupSeconds"] == 0
    assert doc["workload"]["systemPromptTokens"] == 0
    assert doc["workload"]["thinkSeconds"] == 0
    assert doc["scenarios"][0]["requests"] > 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100GB", 100 * 10**9),
        ("64GiB", 64 * 2**30),
        ("64Gi", 64 * 2**30),
        ("64.5Gi", round(64.5 * 2**30)),
        ("128G", 128 * 10**9),
    ],
)
def test_sizes_take_the_units_people_type(
    text: str, expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    derived = _json(capsys, "--cpu", text)["derived"]
    block = derived["blockBytes"]
    # The CPU tier is the given size in whole offload blocks.
    assert expected - block < derived["cpuBytesToUse"] <= expected


def test_plan_takes_a_fractional_binary_weight_size(capsys: pytest.CaptureFixture[str]) -> None:
    # What vLLM logs for gpt-oss-120b's weights: "Model loading took 64.38 GiB".
    argv = ["plan", "--model", "gpt-oss-120b", "--context", "16k", "--sessions", "64"]
    assert main([*argv, "--weights", "64.38Gi", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_a_run_without_completions_after_the_warmup_warns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--duration", "30", "--warmup", "20"]) == 0
    captured = capsys.readouterr()
    assert "warning: simulate: no request completed in the 10 s after the warm-up" in (captured.err)
    assert "--duration" in captured.err
    assert "recomp" in captured.out  # the table still prints, after the warning


def test_an_assumed_prefill_rate_is_said_and_a_measured_one_is_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", *SHORT]) == 0
    assert "the prefill rate is assumed from FLOPs (7,821 tokens/s)" in capsys.readouterr().err
    assert main(["simulate", *SHORT, "--prefill-rate", "9000"]) == 0
    assert "prefill rate is assumed" not in capsys.readouterr().err


def test_the_table_has_requests_per_second(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SHORT]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "req/s" in line)
    assert header.split()[:3] == ["tiers", "req/s", "tok/s"]
    none = next(line for line in out.splitlines() if line.split()[:1] == ["none"])
    assert float(none.split()[1]) > 0


def test_a_plot_into_a_missing_directory_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvtier.simulate

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(kvtier.simulate, "simulate", never)
    missing = tmp_path / "no" / "such" / "sim.png"
    assert main(["simulate", *SHORT, "--plot", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--plot:" in err and "is not a directory" in err


def test_a_run_past_its_wall_time_bound_stops_with_an_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--timeout", "1e-9"]) == 1
    err = capsys.readouterr().err
    assert "--timeout: stopped after 1e-09 s of wall time" in err
    assert len(err.strip().splitlines()) == 1


def test_progress_bound_stops_inside_the_engine() -> None:
    # The engine reports progress along the run, not only at its end.
    from kvtier.simulate import simulate, study_config

    seen: list[float] = []
    simulate(
        study_config(duration_seconds=100.0, warmup_seconds=0.0, scenarios=("none",)),
        progress=lambda scenario, now: seen.append(now),
    )
    assert len(seen) == 100 and seen[0] == 1.0 and seen[-1] == 100.0


GPT_OSS = ["--model", "gpt-oss-120b", "--tp", "1", "--weights", "64.38Gi", "--disk", "none"]


def test_a_staged_open_loop_sweep_reports_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    # gpt-oss-120b needs no --params: its total and active parameters are known.
    argv = [*GPT_OSS, "--replicas", "2", "--routing", "prefix", "--rate", "1,3"]
    argv += ["--stage-seconds", "30", "--groups", "20"]
    doc = _json(capsys, *argv, short=False)
    assert doc["workload"]["shape"] == "shared-prefix"
    assert doc["durationSeconds"] == 60 + 300  # the sweep, then the drain
    assert doc["derived"]["prefillTokensPerSecond"] > 40_000  # 5.1 B active parameters
    stages = doc["scenarios"][1]["stages"]
    assert [s["rate"] for s in stages] == [1, 3]
    assert all(s["requests"] > 0 and "throughputRatio" in s for s in stages)
    assert main(["simulate", *argv]) == 0
    assert "per stage" in capsys.readouterr().out


def test_stages_as_inference_perf_runs_them(capsys: pytest.CaptureFixture[str]) -> None:
    # rate × seconds requests a stage, each stage answered before a pause; the prefill rate
    # as llm-d's calibration measures it (one 8,192-token prompt from an empty cache).
    argv = [*GPT_OSS, "--replicas", "2", "--routing", "prefix", "--rate", "1,3"]
    argv += ["--stage-seconds", "30", "--stage-pause", "10", "--groups", "20"]
    argv += ["--prompt-order", "list", "--prefill-rate", "39065@8192"]
    doc = _json(capsys, *argv, short=False)
    stages = doc["scenarios"][0]["stages"]
    assert [s["requests"] for s in stages] == [30, 90]
    # Its attention over the 8,192 tokens taken out: the linear layers are faster.
    assert doc["derived"]["prefillTokensPerSecond"] > 39_065
    assert main(["simulate", *GPT_OSS, "--stage-pause", "10"]) == 2
    assert "--rate" in capsys.readouterr().err
    assert main(["simulate", *GPT_OSS, "--prefill-rate", "39065@x"]) == 2
    assert "--prefill-rate" in capsys.readouterr().err


def test_a_trace_replays_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"arrival": i, "prefix_id": i % 3, "prefix_tokens": 4000, "input_tokens": 4200,
         "output_tokens": 20}
        for i in range(60)
    ]  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = _json(capsys, *GPT_OSS, "--trace", str(trace), short=False)
    assert doc["workload"] == {"shape": "trace", "source": str(trace), "requests": 60}
    assert doc["scenarios"][0]["requests"] == 60
    assert doc["scenarios"][0]["hitRatios"]["gpu"] > 0.8  # three prefixes, one replica


def test_sessions_and_concurrency_are_set_apart(capsys: pytest.CaptureFixture[str]) -> None:
    workload = _json(capsys, "--sessions", "28", "--concurrency", "7")["workload"]
    assert (workload["shape"], workload["sessions"], workload["concurrency"]) == (
        "agentic",
        28,
        7,
    )


def test_help_does_not_import_the_simulator() -> None:
    code = (
        "import sys; from kvtier.cli import main; main(['--help']); "
        "heavy = ('simpy', 'kvtier.simulate', 'kvtier.cli.simulate'); "
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "simulate" in run.stderr + run.stdout
    assert run.stdout.strip().splitlines()[-1] == "[]"
