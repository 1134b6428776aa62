"""An observation as status: status.observed, TierEffective in decide(), the measured
t_prefill in the crossover when no baseline is typed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

from kvtier import metrics
from kvtier.api.observation import EffectiveState, Observation, TPrefill
from kvtier.observe.series import parse_exposition
from kvtier.observe.status import evaluate, failed, steady, tier_facts
from kvtier.observe.verdict import Thresholds
from kvtier.policy.decide import decide
from kvtier.policy.stored import status_patch
from tests import vllm_exposition as vx
from tests.unit.test_decide import POLICY, conds, facts, tier

READ_AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
METRICS_POLICY: dict[str, Any] = {
    **POLICY,
    "spec": {**cast(dict[str, Any], POLICY["spec"]), "metrics": {"directScrape": {}}},
}


def sized(**status: Any) -> dict[str, Any]:
    t = tier()
    t["status"] = {"sizing": {"blockBytes": vx.BLOCK_BYTES}, **status}
    return t


def observe(scenario: str, previous: dict[str, Any] | None = None) -> Observation:
    traffic = vx.SCENARIOS[scenario]
    before = parse_exposition(
        vx.render("0.33.0", "cpu+fs", vx.totals(traffic, 600)).decode(), "p", 600
    )
    after = parse_exposition(
        vx.render("0.33.0", "cpu+fs", vx.totals(traffic, 720)).decode(), "p", 720
    )
    tf = tier_facts(sized(**(previous or {})))
    assert tf is not None
    return evaluate(tf, before, after, Thresholds(), "DirectScrape", READ_AT)


def test_an_unsized_tier_is_not_observed() -> None:
    assert tier_facts(tier()) is None


def test_the_observed_status_of_the_hit_scenario() -> None:
    obs = observe("hit")
    assert (obs.state.status, obs.state.reason) == ("True", "ServesHits")
    assert obs.observed is not None
    assert obs.observed["readAt"] == "2026-12-01T12:00:00Z"
    assert obs.observed["windowSeconds"] == 120
    assert obs.observed["externalHitRatio"] == 0.75
    assert obs.observed["tPrefillSource"] == "Measured"
    assert obs.observed["crossoverTokens"] == pytest.approx(0.02 / 0.005)
    assert [t["tier"] for t in obs.observed["tiers"]] == ["0:primary", "1:fs"]
    assert obs.t_prefill == TPrefill(0.005, "Measured")


def test_the_previous_verdict_comes_from_the_tiers_status() -> None:
    was: dict[str, Any] = {
        "conditions": [
            {"type": "TierEffective", "status": "True", "reason": "ServesHits", "message": ""}
        ],
        "observed": {},
    }
    first = observe("slow", was)
    assert first.state.status == "True" and first.state.pending_status == "False"
    assert first.observed is not None and first.observed["pendingCount"] == 1
    was["observed"] = first.observed
    second = observe("slow", was)
    assert (second.state.status, second.state.reason) == ("False", "RestoreSlowerThanRecompute")
    assert second.observed is not None and "pendingStatus" not in second.observed


def test_no_samples_a_window_back_waits() -> None:
    tf = tier_facts(sized())
    assert tf is not None
    after = parse_exposition(
        vx.render("0.33.0", "cpu", vx.totals(vx.SCENARIOS["hit"], 60)).decode(), "p", 60
    )
    obs = evaluate(tf, None, after, Thresholds(), "DirectScrape", READ_AT)
    assert (obs.state.status, obs.state.reason, obs.observed) == ("Unknown", "WindowFilling", None)


def test_decide_reports_tier_effective_without_touching_ready() -> None:
    without = decide(facts(tier(), policy=METRICS_POLICY))
    assert conds(without.status)["TierEffective"]["reason"] == "AwaitingMetrics"
    slow = Observation(EffectiveState("False", "NoHits", "no hits"), {"externalHitRatio": 0.0})
    decision = decide(facts(tier(), policy=METRICS_POLICY, observation=slow))
    c = conds(decision.status)
    assert (c["TierEffective"]["status"], c["TierEffective"]["reason"]) == ("False", "NoHits")
    assert decision.status["observed"] == {"externalHitRatio": 0.0}
    assert c["Ready"]["status"] == conds(decide(facts(tier())).status)["Ready"]["status"]


def test_metrics_still_awaited_are_no_warning_event() -> None:
    """A new tier's TierEffective=Unknown AwaitingMetrics is not a problem: no Event of its
    own (Ready has one), and once metrics say something, that change is a Warning or not by
    what it says."""
    new = decide(facts(tier(), policy=METRICS_POLICY))
    assert "AwaitingMetrics" not in {e.reason for e in new.events}
    t = tier()
    t["status"] = new.status
    slow = Observation(EffectiveState("False", "NoHits", "no hits"), {"externalHitRatio": 0.0})
    later = decide(facts(t, policy=METRICS_POLICY, observation=slow))
    assert [(e.type, e.reason) for e in later.events if e.reason == "NoHits"] == [
        ("Warning", "NoHits")
    ]


def test_without_a_metrics_source_there_is_no_tier_effective() -> None:
    obs = Observation(EffectiveState("True", "ServesHits", ""), {"externalHitRatio": 0.5})
    decision = decide(facts(tier(), observation=obs))
    assert "TierEffective" not in conds(decision.status)
    assert decision.status.get("observed") is None


def test_a_failed_read_keeps_the_last_figures() -> None:
    t = tier()
    t["status"] = {"observed": {"externalHitRatio": 0.5}}
    decision = decide(facts(t, policy=METRICS_POLICY, observation=failed("Prometheus: Timeout")))
    assert conds(decision.status)["TierEffective"]["reason"] == "MetricsUnavailable"
    assert decision.status["observed"] == {"externalHitRatio": 0.5}


def test_a_reading_that_repeats_the_figures_writes_no_status() -> None:
    """An idle server's figures do not move: the next reading keeps the stored status (its
    readAt too), so the observer's passes make no status write; new figures do."""
    first = observe("hit")
    assert first.observed is not None
    t = tier()
    t["status"] = status_patch(  # as the API server stores it
        None, decide(facts(tier(), policy=METRICS_POLICY, observation=first)).status
    )
    repeated = {**first.observed, "readAt": "2026-12-01T12:05:00Z"}
    later = Observation(first.state, repeated)
    again = decide(facts(t, policy=METRICS_POLICY, observation=later))
    assert again.status["observed"]["readAt"] == "2026-12-01T12:00:00Z"
    assert status_patch(t["status"], again.status) is None
    moved = Observation(first.state, {**repeated, "externalHitRatio": 0.5})
    changed = decide(facts(t, policy=METRICS_POLICY, observation=moved)).status["observed"]
    assert changed["readAt"] == "2026-12-01T12:05:00Z" and changed["externalHitRatio"] == 0.5


def test_the_crossover_uses_the_measured_t_prefill_when_no_baseline_is_typed() -> None:
    disk = {"type": "NVMe", "nvme": {"pool": "local-nvme"}}
    probe = {"p99Seconds": 0.05, "bandwidthBytesPerSecond": 2e9, "measuredAt": "2026-11-30T11:00Z"}
    t = tier(mode="Apply", disk=disk)
    t["status"] = {"tiers": [{"name": "nvme", "probe": probe}]}
    unmeasured = decide(facts(t))
    assert conds(unmeasured.status)["TierBeneficial"]["reason"] == "NoBaselineTTFT"
    # Too little traffic for a verdict, but the window measured t_prefill: the model decides.
    quiet = EffectiveState("Unknown", "LowTraffic", "")
    measured = decide(facts(t, observation=Observation(quiet, {}, TPrefill(0.001, "Measured"))))
    c = conds(measured.status)["TierBeneficial"]
    assert c["reason"] in ("RestoreWins", "RestoreWinsUnderLoad"), c
    assert "prefill 1 ms/token" in c["message"]
    assert c["message"].endswith("; t_prefill measured from vLLM's metrics")
    nvme = next(x for x in measured.status["tiers"] if x["name"] == "nvme")
    assert nvme["crossoverTokens"] == 50  # p99 0.05 s / 0.001 s per token
    # A typed baseline wins over the measured t_prefill.
    typed = tier(mode="Apply", disk=disk, probe={"baselineTTFTSeconds": 100})
    typed["status"] = t["status"]
    quiet_obs = Observation(quiet, {}, TPrefill(0.001, "Measured"))
    baseline = conds(decide(facts(typed, observation=quiet_obs)).status)["TierBeneficial"]
    assert "prefill 2 ms/token" in baseline["message"]  # 100 s over 50,000 tokens
    assert "measured" not in baseline["message"]


def test_observed_evidence_outranks_the_model_in_tier_beneficial() -> None:
    disk = {"type": "NVMe", "nvme": {"pool": "local-nvme"}}
    probe = {"p99Seconds": 0.05, "bandwidthBytesPerSecond": 2e9, "measuredAt": "2026-11-30T11:00Z"}
    t = tier(mode="Apply", disk=disk, probe={"baselineTTFTSeconds": 100})
    t["status"] = {"tiers": [{"name": "nvme", "probe": probe}]}
    no_hits = Observation(EffectiveState("False", "NoHits", "external hit ratio 0"), {})
    c = conds(decide(facts(t, policy=METRICS_POLICY, observation=no_hits)).status)
    assert (c["TierBeneficial"]["status"], c["TierBeneficial"]["reason"]) == (
        "False",
        "ObservedRecomputeWins",
    )
    assert "observed (NoHits): external hit ratio 0" in c["TierBeneficial"]["message"]
    assert c["TierEffective"]["reason"] == "NoHits"


def test_the_observed_figures_are_exported_as_kvtier_metrics() -> None:
    status = {
        "conditions": [{"type": "TierEffective", "status": "False", "reason": "NoHits"}],
        "observed": {
            "externalHitRatio": 0.0,
            "loadSecondsPerBlock": 0.02,
            "tiers": [{"tier": "1:fs", "chunkHitRatio": 0.25}],
        },
    }
    metrics.observe_tier("llm", "exported", tier(), status)
    labels = {"namespace": "llm", "name": "exported"}
    assert REGISTRY.get_sample_value("kvtier_tier_effective", labels) == 0
    assert REGISTRY.get_sample_value("kvtier_observed_load_seconds_per_block", labels) == 0.02
    assert REGISTRY.get_sample_value("kvtier_observed_external_hit_ratio", labels) == 0
    tier_labels = {**labels, "vllm_tier": "1:fs"}
    assert REGISTRY.get_sample_value("kvtier_observed_vllm_tier_hit_ratio", tier_labels) == 0.25
    metrics.forget_tier("llm", "exported")
    assert REGISTRY.get_sample_value("kvtier_tier_effective", labels) is None


def test_the_measured_t_prefill_holds_within_the_margin() -> None:
    assert steady(0.0052, 0.005, 0.1) == 0.005  # 4 % off: held
    assert steady(0.0060, 0.005, 0.1) == 0.006  # 20 % off: follows
    assert steady(0.005, None, 0.1) == 0.005
    assert steady(None, 0.005, 0.1) is None
    was: dict[str, Any] = {"observed": {"measuredTPrefillSeconds": 0.0048}}
    obs = observe("hit", was)  # measures 0.005, within 10 % of 0.0048
    assert obs.observed is not None and obs.observed["measuredTPrefillSeconds"] == 0.0048
    assert obs.t_prefill == TPrefill(0.0048, "Measured")


def test_the_workers_come_from_the_spec_or_the_decode_role() -> None:
    plan = {
        "plan": {
            "roles": [
                {"role": "prefill", "tensor": 2},
                {"role": "decode", "tensor": 4, "pipeline": 2},
            ]
        }
    }
    from_role = tier_facts(sized(**plan))
    assert from_role is not None and from_role.workers == 8
    spec_tier = sized(**plan)
    spec_tier["spec"]["model"] = {"tensorParallelSize": 2}
    from_spec = tier_facts(spec_tier)
    assert from_spec is not None and from_spec.workers == 2
    bare = tier_facts(sized())
    assert bare is not None and bare.workers == 1
