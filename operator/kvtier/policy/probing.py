"""When to probe a disk tier, and what a finished probe means. Pure: the operator passes the
Jobs and Pods it sees and performs what comes back.

A tier is probed once per (spec generation, kvcache.io/reprobe annotation value): after its
storage is provisioned and before it serves (unless the policy allows probing a serving
tier). One probe Job per tier at a time; a failed or timed-out attempt is recorded in status
and retried with exponential backoff under a new Job name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import CroniterBadDateError, croniter

from kvtier.api.common import timestamp
from kvtier.api.policy import CRON_FIELDS, CRON_MACROS, CRON_RULE, cron_field
from kvtier.api.tier import ConditionType
from kvtier.names.labels import PROBE_TIER, TierRef
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.render.probe_job import (
    ProbeMessageError,
    parse_termination_message,
    probe_job,
    probe_job_name,
)
from kvtier.tiers.base import ProbeVolume

REPROBE_ANNOTATION = "kvcache.io/reprobe"
JOB_NAME = "job-name"  # the label the Job controller puts on its pods
BACKOFF_BASE_SECONDS = 15.0
BACKOFF_MAX_SECONDS = 900.0


@dataclass
class ProbeStep:
    """What to do about the probe this reconcile, and how to report it."""

    verdict: Verdict | None = None
    result: dict[str, Any] | None = None  # the status.tiers[].probe block to write
    create: dict[str, Any] | None = None  # a Job to create
    delete: list[str] = field(default_factory=list)  # Jobs to delete (finished or stale)
    requeue_after: float | None = None
    finished: str | None = None  # "succeeded" | "failed", for metrics


def next_scheduled(schedule: str | None, last: datetime | None) -> datetime | None:
    """When the policy's cron schedule next asks for a probe after the last measurement."""
    if not schedule or last is None:
        return None
    try:
        due: datetime = croniter(schedule, last).get_next(datetime)
    except (ValueError, KeyError):
        return None  # the policy's Ready condition says why (schedule_problem)
    return due


# Where a schedule is tried from: any date would do (one that never fires never does).
SCHEDULE_PROBE_FROM = datetime(2000, 1, 1, tzinfo=UTC)


def schedule_problem(schedule: str | None) -> str | None:
    """What is wrong with a re-probing schedule, for a person (None when it is fine): the
    rule admission checks, for a schedule stored before it, and what croniter still refuses
    or never fires on (February 31st)."""
    if not schedule or schedule in CRON_MACROS:
        return None
    fields = schedule.split()
    if len(fields) != len(CRON_FIELDS):
        return f"{len(fields)} field(s), not a cron schedule ({CRON_RULE})"
    for text, (name, span, value) in zip(fields, CRON_FIELDS, strict=True):
        if not re.fullmatch(cron_field(value, any_day=name.startswith("day")), text):
            return f"the {name} field {text!r} is not within {span} ({CRON_RULE})"
    try:
        croniter(schedule, SCHEDULE_PROBE_FROM).get_next(datetime)
    except CroniterBadDateError:
        return "it never fires (no date matches it)"
    except (ValueError, KeyError) as exc:
        return f"croniter refuses it: {exc}"
    return None


def backoff(failures: int) -> float:
    return float(min(BACKOFF_BASE_SECONDS * 2 ** max(failures - 1, 0), BACKOFF_MAX_SECONDS))


def _parse_time(stamp: object) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = (status.get("state") or {}).get("terminated")
        if state:
            return dict(state)
    return None


def _job_failed(job: Mapping[str, Any]) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return str(cond.get("reason") or "Failed")
    return None


def _serving(target: Mapping[str, Any] | None) -> bool:
    for cond in ((target or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return True
    return False


def plan_probe(
    *,
    tier: TierRef,
    generation: int,
    annotations: Mapping[str, str],
    disk: str,
    volume: ProbeVolume,
    provisioned: bool,
    target: Mapping[str, Any] | None,
    allow_while_serving: bool,
    previous: Mapping[str, Any] | None,
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    image: str,
    block_bytes: int,
    runtime_seconds: int,
    now: datetime,
    schedule: str | None = None,
) -> ProbeStep:
    probed = ConditionType.PROBED.value
    trigger = annotations.get(REPROBE_ANNOTATION, "")
    prev = dict(previous or {})
    failures = int(prev.get("failures") or 0)
    measured_at = _parse_time(prev.get("measuredAt"))
    due = next_scheduled(schedule, measured_at)
    current = (
        measured_at is not None
        and (prev.get("generation"), prev.get("trigger") or "") == (generation, trigger)
        and (due is None or now < due)
    )
    mine = [j for j in jobs if ((j.get("metadata") or {}).get("labels") or {}).get(PROBE_TIER)]
    wanted = probe_job_name(tier, disk, generation, failures)
    step = ProbeStep()
    step.delete = [
        str(j["metadata"]["name"])
        for j in mine
        if j["metadata"]["name"] != wanted and not _active(j)
    ]
    if current:
        p99, p50 = prev.get("p99Seconds"), prev.get("p50Seconds")
        step.verdict = Verdict(
            probed,
            TRUE,
            "Measured",
            f"{disk}: p99 {p99} s, p50 {p50} s, read {prev.get('bandwidthBytesPerSecond')} B/s "
            f"at the model's block size (generation {generation})",
        )
        step.delete = [str(j["metadata"]["name"]) for j in mine]
        if due is not None:
            step.requeue_after = (due - now).total_seconds()  # the policy's next probe
        return step
    if not provisioned:
        step.verdict = Verdict(probed, FALSE, "WaitingForStorage", f"{disk} tier not provisioned")
        return step
    job = next((j for j in mine if j["metadata"]["name"] == wanted), None)
    if job is None:
        if any(_active(j) for j in mine):  # never two probes of one tier at once
            step.verdict = Verdict(probed, FALSE, "Probing", "an earlier probe is still running")
            return step
        if _serving(target) and not allow_while_serving:
            step.verdict = Verdict(
                probed,
                FALSE,
                "Serving",
                f"{disk} probe deferred: the target is serving and the KVCachePolicy does not "
                "allow probing a serving tier (probing.allowWhileServing)",
            )
            return step
        last = _parse_time(prev.get("lastFailureTime"))
        if failures and last is not None:
            wait = (last + timedelta(seconds=backoff(failures)) - now).total_seconds()
            if wait > 0:
                step.verdict = Verdict(
                    probed,
                    FALSE,
                    "ProbeFailed",
                    f"attempt {failures} failed: {prev.get('lastFailure')}; retry in {wait:.0f}s",
                )
                step.requeue_after = wait
                return step
        step.create = probe_job(
            tier,
            volume,
            image=image,
            block_bytes=block_bytes,
            runtime_seconds=runtime_seconds,
            generation=generation,
            attempt=failures,
        )
        step.verdict = Verdict(probed, FALSE, "Probing", f"fio probe Job {wanted} started")
        return step
    return _finished(step, job, pods, prev, generation, trigger, failures, disk, now)


def _active(job: Mapping[str, Any]) -> bool:
    status = job.get("status") or {}
    return not status.get("succeeded") and not status.get("failed") and not _job_failed(job)


def _finished(
    step: ProbeStep,
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    prev: dict[str, Any],
    generation: int,
    trigger: str,
    failures: int,
    disk: str,
    now: datetime,
) -> ProbeStep:
    probed = ConditionType.PROBED.value
    name = str(job["metadata"]["name"])
    mine = [
        p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get("job-name") == name
    ]
    state = next((s for p in mine if (s := _terminated(p))), None)
    failed_reason = _job_failed(job)
    if state is None and failed_reason is None:
        step.verdict = Verdict(probed, FALSE, "Probing", f"fio probe Job {name} is running")
        return step
    step.delete.append(name)
    error: str
    if state is not None and state.get("exitCode") == 0:
        try:
            result = parse_termination_message(str(state.get("message") or ""))
        except ProbeMessageError as exc:
            error = str(exc)
        else:
            step.result = {**result, "generation": generation, "trigger": trigger or None}
            step.finished = "succeeded"
            step.verdict = Verdict(
                probed,
                TRUE,
                "Measured",
                f"{disk}: p99 {result.get('p99Seconds')} s, p50 {result.get('p50Seconds')} s, "
                f"read {result.get('bandwidthBytesPerSecond')} B/s (generation {generation})",
            )
            return step
    elif state is not None:
        try:
            parse_termination_message(str(state.get("message") or ""))
            error = f"probe exited with code {state.get('exitCode')}"
        except ProbeMessageError as exc:
            error = str(exc)
    else:
        error = f"probe Job {failed_reason} (timed out or its pod was lost)"
    failures += 1
    step.finished = "failed"
    step.result = {
        **{k: v for k, v in prev.items() if k not in ("lastFailure", "lastFailureTime")},
        "failures": failures,
        "lastFailure": error[:256],
        "lastFailureTime": timestamp(now),
    }
    step.requeue_after = backoff(failures)
    step.verdict = Verdict(
        probed,
        FALSE,
        "ProbeTimedOut" if state is None else "ProbeFailed",
        f"attempt {failures}: {error}; retry in {step.requeue_after:.0f}s",
    )
    return step
