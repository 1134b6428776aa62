"""`kvtier evict` as a command: its summary, its flags, its metrics, its errors."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kvtier.cli import main
from localcluster import free_port
from tests.unit.evict_tree import BLOCK_BYTES, make_tier

DAY = 86400.0


def kvtier(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtier", *args], capture_output=True, text=True, check=False
    )


def test_once_prints_a_json_summary(roomy_tmp_path: Path) -> None:
    make_tier(roomy_tmp_path, 100, oldest=time.time() - DAY)
    capacity = int(100 * BLOCK_BYTES / 0.9)
    run = kvtier(
        "evict", "--dir", str(roomy_tmp_path), "--once", "--capacity", str(capacity), "-o", "json"
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["acted"] is True
    assert summary["directory"] == str(roomy_tmp_path)
    assert summary["capacityBytes"] == capacity
    assert summary["blockFiles"] == 100
    assert summary["usageRatio"] >= 0.85 and summary["usageRatioAfter"] <= 0.70
    assert summary["evictedFiles"] == 100 - len(list(roomy_tmp_path.rglob("*.bin")))
    assert summary["evictedBytes"] == summary["evictedFiles"] * BLOCK_BYTES


def test_text_summary_and_percent_watermarks(
    roomy_tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tier(roomy_tmp_path, 10, oldest=time.time() - DAY)
    code = main(
        [
            "evict",
            "--dir",
            str(roomy_tmp_path),
            "--once",
            "--capacity",
            "1Mi",
            "--high",
            "1%",
            "--low",
            "0.5%",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"{roomy_tmp_path}: ") and "evicted" in out and "(high 1%, low 0%)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--high", "90"], "argument --high: must be a fraction in (0, 1]"),
        (["--high", "lots"], "argument --high: 'lots' is not a fraction"),
        (["--high", "0.6", "--low", "0.7"], "--low: must be below --high (0.6), got 0.7"),
        (["--capacity", "3 tons"], "--capacity"),
        (["--protect-seconds", "-1"], "argument --protect-seconds: must be zero or more"),
        (["--interval", "0"], "argument --interval: must be more than zero seconds"),
        (["--metrics-port", "70000"], "argument --metrics-port: must be 1 to 65535"),
        (["--once", "--metrics-port", "9000"], "--metrics-port: serves the loop"),
        (["--once", "--interval", "5"], "not allowed with argument --once"),
    ],
)
def test_bad_flags_one_line_exit_2(roomy_tmp_path: Path, args: list[str], message: str) -> None:
    run = kvtier("evict", "--dir", str(roomy_tmp_path), *args)
    assert run.returncode == 2
    assert run.stderr.startswith("kvtier: error: evict: ")
    assert message in run.stderr
    assert len(run.stderr.splitlines()) == 1


def test_bad_directory_one_line_exit_2(roomy_tmp_path: Path) -> None:
    run = kvtier("evict", "--dir", str(roomy_tmp_path / "nope"), "--once")
    assert run.returncode == 2
    assert run.stderr == f"kvtier: error: evict: --dir {roomy_tmp_path / 'nope'}: does not exist\n"


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines())
        if name.startswith("kvtier_evict_")
    }


def test_the_loop_serves_metrics_and_ends_on_sigterm(roomy_tmp_path: Path) -> None:
    make_tier(roomy_tmp_path, 100, oldest=time.time() - DAY)
    capacity = int(100 * BLOCK_BYTES / 0.9)
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "kvtier", "evict", "--dir", str(roomy_tmp_path)),
            *("--interval", "0.2", "--capacity", str(capacity)),
            *("--metrics-port", str(port), "--metrics-address", "127.0.0.1"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        metrics: dict[str, float] = {}
        while time.monotonic() < deadline:
            try:
                metrics = scrape(port)
            except OSError:
                metrics = {}
            after = ("idle", "estimated")  # a pass after the one that evicted
            if any(metrics.get(f'kvtier_evict_passes_total{{result="{r}"}}', 0) for r in after):
                break
            time.sleep(0.1)
        left = len(list(roomy_tmp_path.rglob("*.bin")))
        assert metrics['kvtier_evict_passes_total{result="evicted"}'] == 1
        assert metrics["kvtier_evict_evicted_files_total"] == 100 - left
        assert metrics["kvtier_evict_evicted_bytes_total"] == (100 - left) * BLOCK_BYTES
        assert metrics["kvtier_evict_block_files"] == left
        assert metrics["kvtier_evict_files"] == left + 2  # config.json and the lock file
        assert metrics["kvtier_evict_capacity_bytes"] == capacity
        # The evicting pass went down to the low watermark (what is on disk says so); the
        # later passes only estimate from the volume's growth, which other writers on this
        # machine's disk move too, so their figure is only below the high watermark.
        assert left * BLOCK_BYTES <= 0.70 * capacity
        assert metrics["kvtier_evict_usage_ratio"] < 0.85
        assert metrics["kvtier_evict_used_bytes"] < 0.85 * capacity
        assert metrics["kvtier_evict_above_high_watermark"] == 0
        assert metrics["kvtier_evict_leader"] == 1
        assert time.time() - metrics["kvtier_evict_last_run_timestamp_seconds"] < 30
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        out, err = proc.communicate()
        assert err == ""
        assert "evicted" in out.splitlines()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_metrics_port_in_use_is_one_line(roomy_tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        run = kvtier(
            "evict",
            "--dir",
            str(roomy_tmp_path),
            "--metrics-port",
            str(port),
            "--metrics-address",
            "127.0.0.1",
        )
    assert run.returncode == 3
    assert run.stderr.startswith(f"kvtier: error: evict: --metrics-port {port}: ")
    assert len(run.stderr.splitlines()) == 1


def test_docs_list_every_flag_and_metric() -> None:
    """docs/eviction.md's tables name every flag of `kvtier evict` and every metric."""
    from kvtier.cli import build_parser
    from kvtier.evict.metrics import EvictMetrics

    doc = (Path(__file__).parents[2] / "docs" / "eviction.md").read_text(encoding="utf-8")
    commands = build_parser("evict")._subparsers._group_actions[0].choices
    flags = {o for a in commands["evict"]._actions for o in a.option_strings} - {"-h", "--help"}
    assert flags and {f for f in flags if f.startswith("--") and f"`{f}" not in doc} == set()
    names = {m.name for m in EvictMetrics().registry.collect()}
    counters = {m.name for m in EvictMetrics().registry.collect() if m.type == "counter"}
    missing = {n for n in names if f"`{n}{'_total' if n in counters else ''}" not in doc}
    assert names and missing == set()
