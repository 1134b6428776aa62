"""When the operator probes a tier, and how it reads the outcome (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kvtier.names.labels import PROBE_TIER, TierRef
from kvtier.policy.probing import JOB_NAME, REPROBE_ANNOTATION, backoff, plan_probe
from kvtier.policy.provisioning import pending_writes
from kvtier.render import DesiredWrite
from kvtier.render.probe_job import probe_job_name
from kvtier.tiers.base import ProbeVolume, SharedClaim

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TIER = TierRef("llm", "llama", "uid-1")
REAL = (Path(__file__).parents[1] / "fixtures" / "fio" / "kvtier-probe-real.json").read_text()


def job(name: str, **status: Any) -> dict[str, Any]:
    return {
        "kind": "Job",
        "metadata": {"name": name, "labels": {PROBE_TIER: TIER.id}},
        "status": status,
    }


def pod(job_name: str, exit_code: int, message: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": f"{job_name}-x", "labels": {JOB_NAME: job_name}},
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": exit_code, "message": message}}}
            ]
        },
    }


def step(**kw: Any) -> Any:
    base: dict[str, Any] = {
        "tier": TIER,
        "generation": 2,
        "annotations": {},
        "disk": "CephFS",
        "volume": ProbeVolume("CephFS", SharedClaim("kvtier-llama-cephfs")),
        "provisioned": True,
        "target": {},
        "allow_while_serving": False,
        "previous": None,
        "jobs": [],
        "pods": [],
        "image": "kvtier:test",
        "block_bytes": 5242880,
        "runtime_seconds": 60,
        "now": NOW,
    }
    base.update(kw)
    return plan_probe(**base)


def test_first_probe_starts_a_job_on_the_shared_claim() -> None:
    s = step()
    assert s.create is not None and s.verdict.reason == "Probing"
    assert s.create["metadata"]["name"] == probe_job_name(TIER, "CephFS", 2, 0)
    volumes = s.create["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == "kvtier-llama-cephfs"


def test_waits_for_storage_and_for_a_serving_target() -> None:
    assert step(provisioned=False).create is None
    serving = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    deferred = step(target=serving)
    assert deferred.create is None and deferred.verdict.reason == "Serving"
    assert "allowWhileServing" in deferred.verdict.message
    assert step(target=serving, allow_while_serving=True).create is not None


def test_never_two_probes_at_once() -> None:
    older = job(probe_job_name(TIER, "CephFS", 1, 0))  # still running, earlier generation
    s = step(jobs=[older])
    assert s.create is None and s.verdict.reason == "Probing"


def test_success_records_the_result_and_cleans_up() -> None:
    name = probe_job_name(TIER, "CephFS", 2, 0)
    s = step(jobs=[job(name, succeeded=1)], pods=[pod(name, 0, REAL)])
    assert s.finished == "succeeded" and s.verdict.reason == "Measured"
    assert s.result["p99Seconds"] == json.loads(REAL)["p99Seconds"]
    assert s.result["generation"] == 2 and name in s.delete


def test_up_to_date_result_means_nothing_to_do() -> None:
    prev = {"p99Seconds": 0.01, "measuredAt": "2026-11-30T11:00:00Z", "generation": 2}
    s = step(previous=prev)
    assert s.create is None and s.verdict.status == "True"
    again = step(previous=prev, annotations={REPROBE_ANNOTATION: "now"})
    assert again.create is not None  # the annotation asks for a fresh measurement


def test_failure_and_timeout_back_off_then_retry_under_a_new_name() -> None:
    name = probe_job_name(TIER, "CephFS", 2, 0)
    failed = step(jobs=[job(name, failed=1)], pods=[pod(name, 3, '{"error": "no O_DIRECT"}')])
    assert failed.finished == "failed" and failed.result["failures"] == 1
    assert "no O_DIRECT" in failed.result["lastFailure"] and failed.requeue_after == backoff(1)
    hung = step(
        jobs=[
            job(
                name,
                conditions=[{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}],
            )
        ]
    )
    assert hung.verdict.reason == "ProbeTimedOut" and "DeadlineExceeded" in hung.verdict.message
    waiting = step(previous=failed.result, now=NOW + timedelta(seconds=1))
    assert waiting.create is None and waiting.requeue_after is not None
    retry = step(previous=failed.result, now=NOW + timedelta(seconds=backoff(1) + 1))
    assert retry.create["metadata"]["name"] == probe_job_name(TIER, "CephFS", 2, 1)


def test_garbage_termination_message_is_a_failure_not_a_crash() -> None:
    name = probe_job_name(TIER, "CephFS", 2, 0)
    s = step(jobs=[job(name, succeeded=1)], pods=[pod(name, 0, "not json at all")])
    assert s.finished == "failed" and s.verdict.reason == "ProbeFailed"


def test_backoff_grows_and_is_capped() -> None:
    assert backoff(1) < backoff(2) < backoff(3)
    assert backoff(50) == backoff(60)


def test_policy_schedule_asks_for_a_fresh_probe() -> None:
    prev = {"p99Seconds": 0.01, "measuredAt": "2026-11-29T02:00:00Z", "generation": 2}
    weekly = "0 3 * * 0"  # Sundays 03:00: the next after Sun 29 Nov 02:00 is 03:00 that day
    assert step(previous=prev, schedule=weekly).create is not None  # now is Mon 30 Nov
    fresh = {**prev, "measuredAt": "2026-11-30T11:00:00Z"}
    waiting = step(previous=fresh, schedule=weekly)
    assert waiting.create is None
    assert waiting.requeue_after == (datetime(2026, 12, 6, 3, tzinfo=UTC) - NOW).total_seconds()
    assert step(previous=fresh, schedule="not a cron line").create is None


def test_a_volume_whose_pool_changed_is_replaced_not_patched() -> None:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv"},
        "spec": {"local": {"path": "/var/mnt/nvme"}, "capacity": {"storage": "1Ti"}},
    }
    want = DesiredWrite("Apply", "v1", "PersistentVolume", "pv", None, body, "pv")
    old = {
        **body,
        "spec": {"hostPath": {"path": "/var/mnt/nvme/kvtier/a/b"}, "capacity": {"storage": "1Ti"}},
    }
    [step] = pending_writes([want], {("PersistentVolume", None, "pv"): old})
    assert step.action == "Delete"  # an immutable source: recreate, never a failing patch
    bound = {**old, "status": {"phase": "Bound"}}
    assert pending_writes([want], {("PersistentVolume", None, "pv"): bound}) == []
    resized = {**body, "spec": {**body["spec"], "capacity": {"storage": "2Ti"}}}
    [patch] = pending_writes([want], {("PersistentVolume", None, "pv"): resized})
    assert patch.action == "Apply"


def test_a_bound_claim_only_grows() -> None:
    spec = {
        "storageClassName": "a",
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "2Ti"}},
    }
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "c", "namespace": "n"},
        "spec": spec,
    }
    key = ("PersistentVolumeClaim", "n", "c")
    want = DesiredWrite("Apply", "v1", "PersistentVolumeClaim", "c", "n", body, "c")
    other_class = {**body, "spec": {**spec, "storageClassName": "b"}}
    assert pending_writes([want], {key: other_class}) == []  # refused forever: not tried
    bigger = {**body, "spec": {**spec, "resources": {"requests": {"storage": "3Ti"}}}}
    assert pending_writes([want], {key: bigger}) == []  # never shrinks
    smaller = {**body, "spec": {**spec, "resources": {"requests": {"storage": "1Ti"}}}}
    assert pending_writes([want], {key: smaller}) == [want]  # grows
