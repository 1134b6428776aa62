"""`kvtier plan` / `kvtier models`: the study's examples in JSON, YAML and table form."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
LLAMA_STUDY = ["plan", "--model", "llama-3.1-70b", "--tp", "8", "--context", "128Ki"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "-o", "json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_plan_json_llama_70b_study(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, *LLAMA_STUDY, "--cpu", "64G")
    assert {k: doc["sizing"][k] for k in doc["sizing"] if k in _STATUS_FIELDS} == {
        "bytesPerToken": 327_680,
        "bytesPerTokenPerRank": 40_960,
        "blockBytes": 5_242_880,
        "workingSetBytes": 42_949_672_960,
        "cpuBytesToUse": 64_000_000_000,
        "fitsInCPU": True,
        "contextsInCPU": 1.49,
        "topology": "CPUOnly",
    }
    assert "--bs=5242880" in doc["fioCommand"]
    assert doc["kvTransferConfig"]["kv_connector_extra_config"]["cpu_bytes_to_use"] == 64 * 10**9
    assert {"name", "crossoverTokens", "restoreBlocksPerSecond", "beneficial"} <= set(
        doc["tiers"][0]
    )
    assert isinstance(doc["warnings"], list)


_STATUS_FIELDS = {
    "bytesPerToken",
    "bytesPerTokenPerRank",
    "blockBytes",
    "workingSetBytes",
    "cpuBytesToUse",
    "fitsInCPU",
    "contextsInCPU",
    "topology",
}


def test_plan_json_gpt_oss_block(capsys: pytest.CaptureFixture[str]) -> None:
    """The hybrid manager puts 18 of the 36 layers in one chunk (vLLM's own figure)."""
    doc = _json(capsys, "plan", "--model", "openai/gpt-oss-120b", "--context", "50000")
    assert doc["sizing"]["blockBytes"] == 589_824
    assert doc["vllm"]["layersPerChunk"] == 18
    # 3,125 full-attention chunks + the 8 of the 128-token window.
    assert doc["sizing"]["contextBytes"] == 3_133 * 589_824


def test_plan_json_gpt_oss_hybrid_off(capsys: pytest.CaptureFixture[str]) -> None:
    """--disable-hybrid-kv-cache-manager: every layer in each chunk, the naive formula."""
    doc = _json(
        capsys,
        "plan",
        "--model",
        "gpt-oss-120b",
        "--context",
        "50000",
        "--hybrid-kv-cache-manager",
        "off",
    )
    assert doc["sizing"]["blockBytes"] == 1_179_648
    assert doc["sizing"]["contextBytes"] == 73_728 * 50_000


def test_plan_json_deepseek_per_release(capsys: pytest.CaptureFixture[str]) -> None:
    """MLA at TP 8: one copy per rank in 0.24, one replicated copy rounded to 4 KiB in 0.33."""
    args = ("plan", "--model", "deepseek-v3", "--tp", "8", "--context", "50000")
    old = _json(capsys, *args)
    new = _json(capsys, *args, "--vllm-version", "0.33.0")
    assert old["sizing"]["blockBytes"] == 8 * 16 * 61 * 576 * 2
    assert new["sizing"]["blockBytes"] == 1_126_400  # 1,124,352 B rounded up to 4 KiB
    assert new["vllm"]["replicatedLayout"] and not old["vllm"]["replicatedLayout"]


def test_plan_unknown_vllm_release(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "llama-3.1-8b", "--context", "1000", "--vllm-version", "0.28"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--vllm-version" in err and "0.24.x, 0.33.x" in err


def test_plan_json_nemotron_tp8(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, "plan", "--model", "nemotron-ultra-253b", "--tp", "8", "--context", "50000")
    assert doc["sizing"]["bytesPerTokenPerRank"] == 32_768
    assert doc["sizing"]["bytesPerToken"] == 262_144


def test_plan_restore_vs_recompute(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(
        capsys,
        "plan",
        "--model",
        "nemotron-ultra-253b",
        "--tp",
        "8",
        "--context",
        "50000",
        "--sessions",
        "128",
        "--replicas",
        "2",
        "--node-memory",
        "2Ti",
        "--ttft",
        "60",
        "--tier-p99",
        "cephfs=0.6",
        "--tier-bandwidth",
        "CephFS=205MB/s",
    )
    assert doc["sizing"]["topology"] == "CPUAndCephFS"
    (ceph,) = (t for t in doc["tiers"] if t["name"] == "CephFS")
    assert ceph["crossoverTokens"] == 500
    assert ceph["restoreBlocksPerSecond"] == round(205e6 / 4_194_304, 2)
    # 3,125 blocks × 4 MiB at 205 MB/s is 64 s > 60 s for one request alone; under load the
    # GPUs skip the prefill the tier serves (docs/sizing.md, restore or recompute).
    assert ceph["beneficial"] is True and ceph["decidedBy"] == "throughput"
    assert ceph["latency"]["beneficial"] is False and ceph["throughput"]["beneficial"] is True
    extra = doc["kvTransferConfig"]["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["secondary_tiers"][0]["type"] == "fs"


def test_plan_from_config_json_and_geometry(capsys: pytest.CaptureFixture[str]) -> None:
    from_config = _json(
        capsys, "plan", "--config", str(CONFIGS / "qwen3-32b.json"), "--context", "1000"
    )
    assert from_config["sizing"]["bytesPerToken"] == 262_144
    explicit = _json(capsys, "plan", "--geometry", "80,8,128", "--context", "1000", "--tp", "8")
    assert explicit["sizing"]["bytesPerToken"] == 327_680
    overridden = _json(
        capsys, "plan", "--model", "llama-3.1-70b", "--geometry", "40,8,128", "--context", "1000"
    )
    assert overridden["sizing"]["bytesPerToken"] == 163_840
    assert overridden["model"]["source"] == "explicit"


def test_plan_yaml_matches_json(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, *LLAMA_STUDY, "--cpu", "64G")
    assert main([*LLAMA_STUDY, "--cpu", "64G", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == doc


def test_plan_table_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LLAMA_STUDY, "--cpu", "64G", "--sessions", "2", "--ttft", "60"]) == 0
    out = capsys.readouterr().out
    for text in ("327,680", "5,242,880", "40 GiB", "1.49", "CPUAndNVMe", "--kv-transfer-config"):
        assert text in out
    assert "fio --name=kvtier-probe" in out
    assert "2 (K,V) × 80 attention layers" in out  # the why of bytes per rank


def test_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "gpt-oss-120b" in out and "5,242,880" in out
    assert main(["models", "-o", "json"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    nemotron = next(m for m in models if m["short"] == "nemotron-ultra-253b")
    assert (nemotron["attentionLayers"], nemotron["totalLayers"]) == (64, 162)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--model", "acme/llm-9000", "--context", "1000"], "--model"),
        (["--model", "llama-3.1-70b", "--tp", "3", "--context", "1000"], "--tp"),
        (["--model", "llama-3.1-70b", "--tp", "abc", "--context", "1000"], "--tp"),
        (["--model", "llama-3.1-70b", "--context", "0"], "--context"),
        (["--model", "llama-3.1-70b", "--context", "-5"], "--context"),
        (["--model", "llama-3.1-70b", "--context", "1000", "--cpu", "0"], "--cpu"),
        (["--model", "llama-3.1-70b", "--context", "1000", "--cpu", "lots"], "--cpu"),
        (["--model", "llama-3.1-70b", "--context", "1000", "--kv-dtype", "int4"], "--kv-dtype"),
        (["--model", "llama-3.1-70b", "--context", "1000", "--sessions", "0"], "--sessions"),
        (["--model", "llama-3.1-70b", "--context", "1000", "--tier-p99", "nvme"], "--tier-p99"),
        (
            ["--model", "llama-3.1-70b", "--context", "1000", "--tier-bandwidth", "tape=5MB/s"],
            "--tier-bandwidth",
        ),
        (
            ["--model", "llama-3.1-70b", "--context", "1000", "--tier-bandwidth", "nvme=fast"],
            "--tier-bandwidth",
        ),
        (["--model", "llama-3.1-70b", "--context", "1000", "--disk", "tape"], "--disk"),
        (["--model", "llama-3.1-70b", "--context", "1000", "--ttft", "-1"], "--ttft"),
        (["--geometry", "80,8", "--context", "1000"], "--geometry"),
        (["--context", "1000"], "--model"),
        (["--model", "llama-3.1-70b"], "--context"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: str
) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvtier: error:")
    assert names in err


def test_malformed_config_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": 2,')
    assert main(["plan", "--config", str(bad), "--context", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvtier: error: --config:") and "not valid JSON" in err


def test_no_subcommand_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["--version"]) == 0


def test_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "crossover.svg"
    argv = [*LLAMA_STUDY, "--sessions", "4", "--ttft", "60", "--tier-p99", "nvme=0.05"]
    assert main([*argv, "--tier-bandwidth", "nvme=3GB/s", "--plot", str(out), "-o", "json"]) == 0
    assert "crossover" in out.read_text()


def test_plot_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main([*LLAMA_STUDY, "--plot", str(tmp_path / "x.png")]) == 2  # nothing to draw
    assert "--ttft" in capsys.readouterr().err
    argv = [*LLAMA_STUDY, "--ttft", "60", "--tier-p99", "nvme=0.05"]
    assert main([*argv, "--plot", str(tmp_path / "x.gif")]) == 2
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra were not installed
    assert main([*argv, "--plot", str(tmp_path / "x.png")]) == 1
    assert "pip install 'kvtier[plot]'" in capsys.readouterr().err


def test_python_dash_m() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kvtier", "plan", "--model", "gpt-oss-120b", "--context", "16"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "1,179,648" in run.stdout
