"""gate_tier: restore vs recompute from a probe, with the study's figures."""

import json
from pathlib import Path

import pytest

from kvtier.api.tier import ProbeResult
from kvtier.policy.gate import gate_tier
from kvtier.sizing import SizingError, assess_tier, crossover_tokens

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fio"
LLAMA_BLOCK = 5_242_880  # Llama 3.1 70B, 16 tokens, 16-bit KV
CONTEXT = 50_000
TTFT = 60.0


def _probe(p99: float | None, bandwidth: int | None, **extra: object) -> dict[str, object]:
    return {"p99Seconds": p99, "bandwidthBytesPerSecond": bandwidth, **extra}


def test_study_crossover_from_p99_alone() -> None:
    # 0.6 s p99 at 60 s TTFT over 50,000 tokens: t_prefill 1.2 ms, L = 500 tokens.
    v = gate_tier(_probe(0.6, None), LLAMA_BLOCK, CONTEXT, TTFT, "NVMe")
    assert v.crossover_tokens == 500 == crossover_tokens(0.6, TTFT, CONTEXT)
    assert v.prefill_seconds_per_token == pytest.approx(0.0012)
    assert v.beneficial is True and v.reason == "RestoreWins" and not v.degraded
    assert v.restore_seconds is None and v.recompute_seconds == TTFT
    assert "500" in v.message and "0.6 s" in v.message


def test_fast_nvme_restores() -> None:
    v = gate_tier(_probe(0.00835, 1_278_000_000), LLAMA_BLOCK, CONTEXT, TTFT, "nvme")
    expected = assess_tier(
        "NVMe",
        selected=True,
        context_tokens=CONTEXT,
        block_tokens=16,
        block_bytes=LLAMA_BLOCK,
        ttft_seconds=TTFT,
        p99_seconds=0.00835,
        bandwidth=1_278_000_000,
    )
    assert v.crossover_tokens == expected.crossover_tokens == 7
    assert v.restore_seconds == expected.restore_seconds == pytest.approx(12.8, abs=0.05)
    assert v.beneficial is True and v.reason == "RestoreWins"
    assert "1278 MB/s" in v.message


def test_cephfs_ceiling_loses_per_request_but_wins_under_load() -> None:
    # ~205 MB/s: 3,125 blocks of 5 MiB take 80 s to move, longer than the 60 s recompute of
    # one request on an idle server; but a restore costs no GPU time.
    v = gate_tier(_probe(0.05, 205_000_000), LLAMA_BLOCK, CONTEXT, TTFT, "CephFS")
    assert v.beneficial is True and v.reason == "RestoreWinsUnderLoad" and not v.degraded
    assert v.decided_by == "throughput"
    assert v.latency is not None and v.latency.beneficial is False
    assert v.restore_seconds == pytest.approx(79.9, abs=0.1)
    assert "recomputing them 60 s" in v.message and "GPU-seconds" in v.message


def test_object_store_tail_above_ceiling_is_degraded() -> None:
    # The study's RGW p99 at 5 MB blocks.
    v = gate_tier(_probe(1.13, 900_000_000), LLAMA_BLOCK, CONTEXT, TTFT, "ObjectStore", 0.25)
    assert v.degraded and v.reason == "TailLatencyAboveCeiling"
    assert "1.13 s exceeds" in v.message and "0.25 s" in v.message
    assert v.crossover_tokens == crossover_tokens(1.13, TTFT, CONTEXT)


@pytest.mark.parametrize(
    ("kind", "p99", "ceiling"),
    [("s3", 0.1, 0.25), ("ObjectStore", 1.13, None), ("NVMe", 1.13, 0.25)],
)
def test_not_degraded(kind: str, p99: float, ceiling: float | None) -> None:
    v = gate_tier(_probe(p99, 900_000_000), LLAMA_BLOCK, CONTEXT, TTFT, kind, ceiling)
    assert not v.degraded and v.reason in ("RestoreWins", "RecomputeWins")


def test_default_ceiling_is_the_policy_built_in() -> None:
    assert gate_tier(_probe(0.3, None), LLAMA_BLOCK, CONTEXT, TTFT, "ObjectStore").degraded
    assert not gate_tier(_probe(0.2, None), LLAMA_BLOCK, CONTEXT, TTFT, "ObjectStore").degraded


def test_without_baseline_ttft() -> None:
    v = gate_tier(_probe(0.01, 1_000_000_000), LLAMA_BLOCK, CONTEXT, None, "NVMe")
    assert v.beneficial is None and v.reason == "NoBaselineTTFT"
    assert v.crossover_tokens is None and v.prefill_seconds_per_token is None
    assert v.restore_seconds == pytest.approx(16.384)
    assert "no baseline TTFT" in v.message


@pytest.mark.parametrize("probe", [None, {}, _probe(None, 0)])
def test_not_probed(probe: dict[str, object] | None) -> None:
    v = gate_tier(probe, LLAMA_BLOCK, CONTEXT, TTFT, "NVMe")
    assert v.beneficial is None and v.reason == "NotProbed" and not v.degraded


def test_buffered_result_is_flagged_in_the_message() -> None:
    v = gate_tier(_probe(0.001, None, buffered=True), LLAMA_BLOCK, CONTEXT, TTFT, "NVMe")
    assert "buffered I/O" in v.message


def test_accepts_model_status_dict_and_full_probe_document() -> None:
    document = json.loads((FIXTURES / "kvtier-probe-real.json").read_text())
    model = ProbeResult.model_validate(
        {k: document[k] for k in ("p99Seconds", "bandwidthBytesPerSecond", "buffered")}
    )
    verdicts = {
        gate_tier(p, LLAMA_BLOCK, CONTEXT, TTFT, "NVMe", block_tokens=16)
        for p in (document, model, model.to_k8s())
    }
    assert len(verdicts) == 1
    assert next(iter(verdicts)).as_dict()["crossoverTokens"] is not None


def test_invalid_inputs() -> None:
    with pytest.raises(SizingError, match="unknown disk type"):
        gate_tier(_probe(0.1, None), LLAMA_BLOCK, CONTEXT, TTFT, "floppy")
    with pytest.raises(ValueError, match="p99Seconds"):
        gate_tier(_probe(-1.0, None), LLAMA_BLOCK, CONTEXT, TTFT, "NVMe")
