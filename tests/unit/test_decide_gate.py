"""TierBeneficial in the operator judges what the study measured: the tier's share of a prefix."""

from __future__ import annotations

from typing import Any

from tests.unit.test_decide import conds, facts, llmisvc, node, tier


def _probed_cephfs(p99: float, bandwidth: float) -> dict[str, Any]:
    t = tier(mode="Apply", disk={"type": "CephFS"}, probe={"baselineTTFTSeconds": 60})
    t["spec"]["workload"] = {"averageContextTokens": 50_000, "concurrentSessions": 64}
    t["status"] = {
        "tiers": [
            {
                "name": "cephfs",
                "probe": {"p99Seconds": p99, "bandwidthBytesPerSecond": bandwidth},
            }
        ]
    }
    return t


def test_the_studys_cephfs_case_is_beneficial_with_the_deciding_view() -> None:
    """Nemotron-Ultra at TP 8, three replicas sharing CephFS at the study's 205 MB/s and 50 ms
    p99: restoring a whole context at that bandwidth takes longer than the 60 s TTFT, but the
    disk tier serves only what the CPU tiers lack and a restore costs no GPU time."""
    d = decide_with(_probed_cephfs(0.05, 205e6), replicas=3)
    beneficial = conds(d.status)["TierBeneficial"]
    assert beneficial["status"] == "True", beneficial
    assert beneficial["reason"] in ("RestoreWins", "RestoreWinsUnderLoad")


def test_a_long_tail_that_costs_more_than_the_prefill_saved_loses() -> None:
    d = decide_with(_probed_cephfs(120.0, 1e6), replicas=3)
    beneficial = conds(d.status)["TierBeneficial"]
    assert (beneficial["status"], beneficial["reason"]) == ("False", "RecomputeWins")


def decide_with(t: dict[str, Any], replicas: int) -> Any:
    from kvtier.policy.decide import decide

    # Nodes whose memory holds a third of each replica's working set in its CPU tier.
    nodes = [node(f"gpu-node-{i}", memory="512Gi") for i in range(4)]
    return decide(facts(t, target=llmisvc(replicas=replicas), nodes=nodes))


def test_status_carries_both_views_and_validates_against_the_crd_model() -> None:
    from kvtier.api.tier import KVCacheTierStatus
    from kvtier.policy.stored import prune

    d = decide_with(_probed_cephfs(0.05, 205e6), replicas=3)
    (cephfs,) = (t for t in d.status["tiers"] if t["name"] == "cephfs")
    assert cephfs["decidedBy"] == "throughput"
    assert cephfs["latency"]["beneficial"] is False and cephfs["throughput"]["beneficial"]
    assert cephfs["latency"]["tierTokens"] > 0
    assert d.status["sizing"]["vllmRelease"] == "0.24"
    assert d.status["sizing"]["contextBytes"] == 262_144 * 50_000
    KVCacheTierStatus.model_validate(prune(d.status))
