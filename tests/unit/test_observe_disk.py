"""DiskPressure from the evictor's own exposition (rendered by kvtier.evict.metrics): the
verdict over a window, its hysteresis, decide() writing the condition and usedBytes, and the
kvtier_tier_disk_pressure gauge."""

from __future__ import annotations

from typing import Any, cast

from prometheus_client import REGISTRY

from kvtier import metrics
from kvtier.api.observation import DiskObservation, EffectiveState, Observation
from kvtier.evict.metrics import EvictMetrics
from kvtier.observe import disk
from kvtier.observe.series import Snapshot, merge, parse_exposition
from kvtier.observe.status import tier_facts
from kvtier.observe.verdict import Thresholds
from kvtier.policy.decide import decide
from tests import evictor_exposition as ex
from tests.unit.test_decide import POLICY, conds, facts, tier

TH = Thresholds()
WINDOW = 300.0


def snap(at: float, **usage_by_pod: float | None) -> Snapshot:
    """Several evictors' expositions, as one read of them at `at`."""
    return merge(
        (
            parse_exposition(ex.exposition(u).decode(), pod, at, disk.READ)
            for pod, u in usage_by_pod.items()
        ),
        at,
    )


def run(
    before: Snapshot | None, after: Snapshot, previous: EffectiveState | None = None
) -> DiskObservation:
    return disk.evaluate("nvme", before, after, WINDOW, TH, previous)


def test_the_names_read_are_the_evictors_own_gauges() -> None:
    exported = {m.name for m in EvictMetrics().registry.collect() if m.type == "gauge"}
    assert set(disk.READ) <= exported


def test_a_tier_above_its_high_watermark_at_both_ends_of_the_window_is_under_pressure() -> None:
    obs = run(snap(0, p0=0.90), snap(WINDOW, p0=0.92))
    assert (obs.state.status, obs.state.reason) == ("True", disk.REASON_ABOVE)
    assert obs.used_bytes == int(0.92 * ex.CAPACITY) and obs.capacity_bytes == ex.CAPACITY
    assert "pod p0" in obs.state.message and "92%" in obs.state.message
    assert "92.0 GiB of 100.0 GiB used (92%, high watermark 85%)" in obs.state.message


def test_a_tier_that_crossed_the_watermark_within_the_window_is_not_yet() -> None:
    obs = run(snap(0, p0=0.60), snap(WINDOW, p0=0.90))
    assert (obs.state.status, obs.state.reason) == ("False", disk.REASON_BRIEFLY_ABOVE)
    assert run(None, snap(WINDOW, p0=0.90)).state.reason == disk.REASON_BRIEFLY_ABOVE


def test_below_the_watermark_is_no_pressure() -> None:
    obs = run(snap(0, p0=0.70), snap(WINDOW, p0=0.72))
    assert (obs.state.status, obs.state.reason) == ("False", disk.REASON_BELOW)
    assert obs.used_bytes == int(0.72 * ex.CAPACITY)


def test_the_fullest_pod_speaks_for_an_nvme_tier_and_standby_evictors_not_at_all() -> None:
    obs = run(snap(0, a=0.50, b=0.90, c=None), snap(WINDOW, a=0.55, b=0.95, c=None))
    assert obs.state.status == "True" and "pod b" in obs.state.message
    assert obs.used_bytes == int(0.95 * ex.CAPACITY)
    # One pod above at the start and another at the end: no pod stayed above.
    assert run(snap(0, a=0.90, b=0.10), snap(WINDOW, a=0.10, b=0.90)).state.status == "False"


def test_no_evictor_that_acted_is_unknown() -> None:
    for after in (Snapshot(WINDOW), snap(WINDOW, c=None)):
        obs = run(snap(0, c=None), after)
        assert (obs.state.status, obs.state.reason) == ("Unknown", disk.REASON_UNAVAILABLE)
        assert obs.used_bytes is None
    failed = disk.failed("cephfs", "Prometheus: Timeout: no answer")
    assert failed.state.reason == disk.REASON_UNAVAILABLE and failed.tier == "cephfs"


def test_pressure_clears_only_below_the_margin_and_after_two_evaluations() -> None:
    above = run(snap(0, p0=0.90), snap(WINDOW, p0=0.90)).state
    # Just under 85 %, within the 10 % band: still under pressure.
    held = run(snap(0, p0=0.84), snap(WINDOW, p0=0.84), above).state
    assert (held.status, held.reason) == ("True", disk.REASON_ABOVE)
    # Evicted down to the low watermark: one evaluation wants False, the second flips it.
    first = run(snap(0, p0=0.70), snap(WINDOW, p0=0.70), above).state
    assert first.status == "True" and (first.pending_status, first.pending_count) == ("False", 1)
    second = run(snap(0, p0=0.70), snap(WINDOW, p0=0.70), first).state
    assert (second.status, second.reason) == ("False", disk.REASON_BELOW)


METRICS_POLICY: dict[str, Any] = {
    **POLICY,
    "spec": {**cast(dict[str, Any], POLICY["spec"]), "metrics": {"directScrape": {}}},
}
NVME = {"disk": {"type": "NVMe", "nvme": {"pool": "local-nvme"}}}


def _observation(d: DiskObservation) -> Observation:
    return Observation(EffectiveState("Unknown", "LowTraffic", "quiet"), None, disk=d)


def test_decide_writes_disk_pressure_and_used_bytes_without_blocking_ready() -> None:
    obs = run(snap(0, p0=0.90), snap(WINDOW, p0=0.95))
    d = decide(facts(tier(**NVME), policy=METRICS_POLICY, observation=_observation(obs)))
    c = conds(d.status)
    assert (c["DiskPressure"]["status"], c["DiskPressure"]["reason"]) == ("True", disk.REASON_ABOVE)
    assert c["Ready"]["status"] == "True"
    nvme = next(t for t in d.status["tiers"] if t["name"] == "nvme")
    assert nvme["usedBytes"] == int(0.95 * ex.CAPACITY)
    assert any(e.reason == disk.REASON_ABOVE and e.type == "Warning" for e in d.events)

    # The next reconcile without a new reading keeps both.
    again = tier(**NVME)
    again["status"] = d.status
    kept = decide(facts(again, policy=METRICS_POLICY))
    assert conds(kept.status)["DiskPressure"]["reason"] == disk.REASON_ABOVE
    assert next(t for t in kept.status["tiers"] if t["name"] == "nvme")["usedBytes"] == int(
        0.95 * ex.CAPACITY
    )

    metrics.observe_tier("llm", "nemotron", again, d.status)
    try:
        labels = {"namespace": "llm", "name": "nemotron", "tier": "nvme"}
        assert REGISTRY.get_sample_value("kvtier_tier_disk_pressure", labels) == 1
        assert REGISTRY.get_sample_value("kvtier_tier_used_bytes", labels) == int(
            0.95 * ex.CAPACITY
        )
    finally:
        metrics.forget_tier("llm", "nemotron")


def test_no_disk_pressure_without_a_metrics_source_or_a_disk_tier() -> None:
    assert "DiskPressure" not in conds(decide(facts(tier(**NVME))).status)
    cpu_only = decide(facts(tier(disk={"type": "None"}), policy=METRICS_POLICY))
    assert "DiskPressure" not in conds(cpu_only.status)
    waiting = decide(facts(tier(**NVME), policy=METRICS_POLICY))
    assert conds(waiting.status)["DiskPressure"]["status"] == "Unknown"


def test_tier_facts_name_the_disk_tier_its_claim_and_the_condition_in_force() -> None:
    t = tier()
    t["status"] = {
        "sizing": {"blockBytes": 5_242_880},
        "tiers": [{"name": "cpu"}, {"name": "cephfs", "claimName": "kv-shared"}],
        "conditions": [{"type": "DiskPressure", "status": "True", "reason": disk.REASON_ABOVE}],
    }
    tf = tier_facts(t)
    assert tf is not None and (tf.disk_tier, tf.disk_claim) == ("cephfs", "kv-shared")
    assert tf.disk_previous == EffectiveState("True", disk.REASON_ABOVE, "")
    t["status"]["tiers"] = [{"name": "cpu"}]
    assert (none := tier_facts(t)) is not None and none.disk_tier is None
