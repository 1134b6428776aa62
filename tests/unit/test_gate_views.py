"""The gate's two views (latency, throughput), observed evidence, and issue 23's headline."""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main
from kvtier.policy.gate import ObservedEvidence, gate_tier, plan_share
from kvtier.sizing import SizingInput, lookup_model, plan
from kvtier.sizing.tiers import tier_share

NEMOTRON_BLOCK = 4_194_304  # 16 tokens × 262,144 B
CONTEXT = 50_000
HEADLINE = [
    "plan",
    "--model",
    "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1",
    "--tp",
    "8",
    "--context",
    "50000",
    "--sessions",
    "64",
    "--replicas",
    "3",
    "--ttft",
    "60",
    "--tier-p99",
    "cephfs=0.05",
    "--tier-bandwidth",
    "cephfs=205MB/s",
    "--disk",
    "CephFS",
]


def _selected(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main([*argv, "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    (tier,) = (t for t in document["tiers"] if t["selected"])
    return tier  # type: ignore[no-any-return]


def test_issue_23_headline_is_beneficial_with_the_reason(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tier = _selected(capsys, HEADLINE)
    assert tier["name"] == "CephFS" and tier["beneficial"] is True
    assert tier["decidedBy"] == "throughput"
    latency, throughput = tier["latency"], tier["throughput"]
    assert isinstance(latency, dict) and isinstance(throughput, dict)
    # Three replicas share CephFS: without session affinity 2/3 of a prefix comes from it.
    assert latency["tierTokens"] == 33_333 and latency["crossoverTokens"] == 42
    assert latency["beneficial"] is False  # one request alone: 42.7 s restore ≥ 40 s recompute
    assert throughput["restoreTokensPerSecond"] == 782.0  # 205 MB/s ÷ 262,144 B per token
    assert throughput["beneficial"] is True
    assert "throughput view" in str(tier["reason"]) and "latency view" in str(tier["reason"])
    # The table says it too, and the plan warns of no losing tier.
    monkeypatch.setenv("COLUMNS", "400")  # one line per figure
    assert main(HEADLINE) == 0
    table = capsys.readouterr().out
    assert "beneficial: true" in table and "decided by throughput view" in table
    assert "CephFS tier: recompute wins" not in table


def test_the_studys_single_node_nvme_case_wins_both_views(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tier = _selected(
        capsys,
        [
            *HEADLINE[:7],
            "--sessions",
            "14",
            "--cpu",
            "128Gi",
            "--ttft",
            "60",
            "--tier-p99",
            "nvme=0.00835",
            "--tier-bandwidth",
            "nvme=6.5GB/s",
            "--disk",
            "NVMe",
        ],
    )
    assert tier["name"] == "NVMe" and tier["beneficial"] is True and tier["decidedBy"] == "both"


def test_measured_prefill_time_replaces_ttft_over_context() -> None:
    # 0.1 ms/token measured: L = 0.05 s ÷ 0.1 ms = 500 tokens, not 42 as with 60 s ÷ 50K.
    probe = {"p99Seconds": 0.05, "bandwidthBytesPerSecond": 205_000_000}
    observed = ObservedEvidence("Unknown", "LowTraffic", "too little traffic", 1e-4)
    v = gate_tier(probe, NEMOTRON_BLOCK, CONTEXT, 60.0, "CephFS", observed=observed)
    assert v.crossover_tokens == 500 and v.prefill_seconds_per_token == 1e-4
    assert v.latency is not None and v.latency.prefill_source == "Measured"
    assert v.decided_by == "throughput"  # Unknown evidence leaves the verdict to the model


@pytest.mark.parametrize(
    ("status", "beneficial", "reason"),
    [("False", False, "ObservedRecomputeWins"), ("True", True, "ObservedRestoreWins")],
)
def test_observed_evidence_outranks_the_model(status: str, beneficial: bool, reason: str) -> None:
    fast = {"p99Seconds": 0.001, "bandwidthBytesPerSecond": 6_000_000_000}
    observed = ObservedEvidence(status, "NoHits", "0 % external hits", None)  # type: ignore[arg-type]
    v = gate_tier(fast, NEMOTRON_BLOCK, CONTEXT, 60.0, "NVMe", observed=observed)
    assert v.beneficial is beneficial and v.reason == reason and v.decided_by == "observed"
    assert "0 % external hits" in v.message and "restore wins" in v.message


def test_nothing_expected_from_the_tier_is_unknown_not_false() -> None:
    probe = {"p99Seconds": 0.05, "bandwidthBytesPerSecond": 205_000_000}
    v = gate_tier(probe, NEMOTRON_BLOCK, CONTEXT, 60.0, "NVMe", share=0.0)
    assert v.beneficial is None and v.reason == "NothingToRestore"


def test_a_tail_longer_than_the_prefill_it_saves_loses_both_views() -> None:
    slow = {"p99Seconds": 1.13, "bandwidthBytesPerSecond": 205_000_000}
    v = gate_tier(slow, NEMOTRON_BLOCK, 500, 0.6, "CephFS", object_store_max_p99=None)
    assert v.beneficial is False and v.reason == "RecomputeWins" and v.decided_by == "both"


@pytest.mark.parametrize(
    ("cpu", "working_set", "replicas", "shared", "share"),
    [
        (100, 100, 1, False, 0.0),  # fits: the CPU tier holds every prefix
        (100, 100, 3, False, 0.0),  # NVMe is per node: the same replica's CPU tier has it
        (100, 100, 3, True, 2 / 3),  # a shared tier serves the turns that change replica
        (65, 100, 1, True, 0.35),  # what the CPU tier cannot hold
        (65, 100, 2, True, 0.675),
    ],
)
def test_tier_share(cpu: int, working_set: int, replicas: int, shared: bool, share: float) -> None:
    assert tier_share(cpu, working_set, replicas, shared) == pytest.approx(share)


def test_the_operator_gate_gets_the_plans_share_and_agrees_with_kvtier_plan() -> None:
    sp = plan(
        SizingInput(
            geometry=lookup_model("nemotron-ultra"),
            average_context_tokens=CONTEXT,
            concurrent_sessions=64,
            replicas=3,
            tensor_parallel_size=8,
            disk_type="CephFS",
            baseline_ttft_seconds=60,
            tier_p99_seconds={"CephFS": 0.05},
            tier_bandwidth_bytes_per_second={"CephFS": 205e6},
        )
    )
    assert plan_share(sp) == pytest.approx(2 / 3)
    probe = {"p99Seconds": 0.05, "bandwidthBytesPerSecond": 205_000_000}
    v = gate_tier(
        probe,
        sp.sizing.block_bytes,
        CONTEXT,
        60.0,
        "CephFS",
        share=plan_share(sp),
        bytes_per_token=sp.sizing.bytes_per_token,
    )
    (chosen,) = (t for t in sp.tiers if t.selected)
    assert (
        (v.beneficial, v.decided_by)
        == (chosen.beneficial, chosen.decided_by)
        == (
            True,
            "throughput",
        )
    )
    assert v.reason == "RestoreWinsUnderLoad"
    assert v.latency == chosen.latency and v.throughput == chosen.throughput
