"""`kvtier plan` says the disk tier's capacity and warns about inputs that are likely mistakes;
`kvtier models` fits 80 columns without breaking a name."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kvtier.cli import main
from kvtier.cli.plan import render_models
from kvtier.sizing import geometry_from_hf_config, load_catalog, lookup_model

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
GiB = 2**30
LLAMA = ["plan", "--model", "llama-3.1-70b", "--tp", "8"]


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_cephfs_capacity_is_the_working_set_of_all_replicas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _plan(
        capsys, *LLAMA, "--context", "128Ki", "--sessions", "32", "--replicas", "2", "--cpu", "64Gi"
    )
    assert doc["sizing"]["topology"] == "CPUAndCephFS"
    # 327,680 B/token × 131,072 tokens × 32 sessions = 1,280 GiB, already whole GiB.
    assert doc["sizing"]["diskBytes"] == 1280 * GiB == doc["sizing"]["workingSetBytesAllReplicas"]
    assert "all replicas" in doc["decisions"]["diskBytes"]


def test_nvme_capacity_is_the_working_set_per_replica(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*LLAMA, "--context", "50000", "--sessions", "4", "--cpu", "16Gi", "--disks", "nvme"]
    doc = _plan(capsys, *argv)
    assert doc["sizing"]["topology"] == "CPUAndNVMe"
    working_set = doc["sizing"]["workingSetBytes"]  # 327,680 × 50,000 × 4 = 61.04 GiB
    assert doc["sizing"]["diskBytes"] == 62 * GiB and 61 * GiB < working_set <= 62 * GiB


def test_no_disk_tier_no_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _plan(capsys, *LLAMA, "--context", "1000")
    assert doc["sizing"]["topology"] == "CPUOnly" and doc["sizing"]["diskBytes"] is None


def test_table_prints_the_disk_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main([*LLAMA, "--context", "128Ki", "--sessions", "32", "--replicas", "2", "--cpu", "64Gi"])
        == 0
    )
    out = capsys.readouterr().out
    assert "diskBytes" in out and "1,374,389,534,720" in out and "1.25 TiB" in out


def _warnings(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    warnings: list[str] = _plan(capsys, *argv)["warnings"]
    return warnings


def test_context_beyond_max_position_embeddings(capsys: pytest.CaptureFixture[str]) -> None:
    over = _warnings(capsys, "plan", "--model", "qwen3-8b", "--context", "50000")
    assert any("max_position_embeddings 40,960" in w for w in over)
    config = str(CONFIGS / "qwen3-32b.json")
    from_config = _warnings(capsys, "plan", "--config", config, "--context", "50000")
    assert any("max_position_embeddings 40,960" in w for w in from_config)
    at_limit = _warnings(capsys, *LLAMA, "--context", "128Ki")  # exactly 131,072: fine
    assert not any("max_position_embeddings" in w for w in at_limit)


def test_catalog_context_lengths_agree_with_config_json() -> None:
    for fixture in CONFIGS.glob("*.json"):
        from_config = geometry_from_hf_config(fixture)
        if from_config.max_position_embeddings is None:
            continue
        entry = lookup_model(fixture.stem)
        assert entry.max_position_embeddings == from_config.max_position_embeddings, fixture
    assert all(e.geometry.max_position_embeddings for e in load_catalog())


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--tier-bandwidth", "cephfs=205"], "205 B/s, slower than any disk"),
        (["--tier-bandwidth", "nvme=3000"], "did you mean 3000MB/s?"),
        (["--tier-p99", "nvme=50"], "did you mean 0.05 (50 ms)?"),
        (["--cpu", "100Ti"], "--cpu 100 TiB"),
        (["--node-memory", "1Ei"], "--node-memory"),
        (["--sessions", "5000000"], "--sessions 5,000,000"),
        (["--ttft", "7200"], "--ttft 7200 s is over an hour"),
    ],
)
def test_implausible_inputs_warn(
    capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    warnings = _warnings(capsys, *LLAMA, "--context", "1000", *extra)
    assert any(expected in w for w in warnings), warnings


def test_absurd_context_without_a_known_limit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--geometry", "80,8,128", "--context", "20Mi", "--cpu", "64Gi"]
    assert any("longer than any serving model" in w for w in _warnings(capsys, *argv))


@pytest.mark.parametrize(
    "extra",
    [
        ["--tier-bandwidth", "cephfs=205MB/s", "--tier-p99", "cephfs=0.05"],
        ["--tier-bandwidth", "nvme=3GB/s", "--ttft", "60", "--cpu", "64Gi"],
    ],
)
def test_plausible_inputs_do_not_warn(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    warnings = _warnings(capsys, *LLAMA, "--context", "50000", "--node-memory", "2Ti", *extra)
    assert not any("did you mean" in w or "than any" in w for w in warnings), warnings


def _models_at(width: int) -> str:
    json_out = io.StringIO()
    with contextlib.redirect_stdout(json_out):
        assert main(["models", "-o", "json"]) == 0
    out = io.StringIO()
    render_models(json.loads(json_out.getvalue())["models"], Console(file=out, width=width))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100, 160])
def test_models_never_break_a_name(width: int) -> None:
    text = _models_at(width)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    words = {w for line in lines for w in line.split()}
    for entry in load_catalog():
        org, _, name = entry.id.rpartition("/")
        assert entry.id in words or (f"{org}/" in words and name in words), (width, entry.id)
        assert entry.short in words
    if width >= 100:  # wide enough: each id on one line
        assert all(entry.id in words for entry in load_catalog())
