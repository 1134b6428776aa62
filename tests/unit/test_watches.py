"""Watch events about a tier being reconciled are judged once that reconcile is done.

The watch can deliver the echo of a reconcile's own write before the worker has taken the
write's response into the cache; judged at once, the echo would look like news and wake the
tier for one more decision.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client

from kvtier.controller.controller import Controller
from kvtier.controller.watches import on_owned, on_target, on_tier
from kvtier.controller.workqueue import WorkQueue
from kvtier.kube.rest import Kube
from kvtier.names import API_VERSION
from kvtier.names.labels import TIER_ID
from kvtier.names.objects import tier_id

KEY = ("ns", "t")
VERSION = "serving.kserve.io/v1beta1"


def tier(rv: int, cpu: str = "20Gi") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "KVCacheTier",
        "metadata": {"namespace": "ns", "name": "t", "resourceVersion": str(rv)},
        "spec": {"targetRef": {"kind": "InferenceService", "name": "srv"}, "cpu": {"size": cpu}},
    }


def target(rv: int) -> dict[str, Any]:
    return {
        "apiVersion": VERSION,
        "kind": "InferenceService",
        "metadata": {"namespace": "ns", "name": "srv", "resourceVersion": str(rv)},
    }


def claim(rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "namespace": "ns",
            "name": "c",
            "resourceVersion": str(rv),
            "labels": {TIER_ID: tier_id(*KEY)},
        },
    }


def reconcile_with_events(
    events: list[tuple[Any, str, dict[str, Any]]], responses: list[dict[str, Any]]
) -> tuple[Controller, list[Any]]:
    """Start a reconcile of KEY, deliver `events` while it runs, then take `responses` (the
    writes' results) into the cache as the worker does, and finish. What is queued after."""

    async def run() -> tuple[Controller, list[Any]]:
        controller = Controller(Kube(client.ApiClient()))
        controller.cache.set_tier(KEY, tier(10))
        controller.cache.set_target(("InferenceService", "ns", "srv"), VERSION, target(5))
        controller.queue.add(KEY)
        key = await controller.queue.get()
        for handler, event, obj in events:
            handler(controller, event, obj)
        assert len(controller.queue) == 0, "nothing about the tier is judged while it runs"
        for response in responses:
            if response["kind"] == "KVCacheTier":
                controller.cache.set_tier(KEY, response)
            else:
                controller.cache.remember_written(response)
        controller.queue.done(key)
        after = []
        while len(controller.queue):
            after.append(await controller.queue.get())
            controller.queue.done(after[-1])
        return controller, after

    return asyncio.run(run())


def test_echoes_of_a_reconciles_own_writes_wake_nothing() -> None:
    controller, after = reconcile_with_events(
        [(on_tier, "MODIFIED", tier(11)), (on_target, "MODIFIED", target(12))],
        [tier(11), target(12), tier(13)],  # finalizer, target, status (its echo comes later)
    )
    assert after == []
    assert controller.cache.tiers[KEY]["metadata"]["resourceVersion"] == "13"


def test_a_change_by_someone_else_during_a_reconcile_wakes_the_tier_after_it() -> None:
    controller, after = reconcile_with_events(
        [(on_tier, "MODIFIED", tier(11)), (on_tier, "MODIFIED", tier(14, cpu="30Gi"))],
        [tier(11), tier(13)],
    )
    assert after == [KEY]
    assert controller.cache.tiers[KEY]["spec"]["cpu"]["size"] == "30Gi"


def test_owned_objects_and_deletions_are_held_too() -> None:
    _, after = reconcile_with_events([(on_owned, "ADDED", claim(12))], [claim(12)])
    assert after == []
    controller, after = reconcile_with_events([(on_tier, "DELETED", tier(11))], [])
    assert after == [KEY] and KEY not in controller.cache.tiers


def test_held_work_runs_in_order_when_the_key_is_done_and_a_failure_stops_nothing() -> None:
    def fail() -> None:
        raise RuntimeError("a handler's bug")

    async def scenario() -> list[str]:
        q: WorkQueue[str] = WorkQueue()
        ran: list[str] = []
        assert not q.hold("a", lambda: ran.append("never")), "not being processed: not held"
        q.add("a")
        key = await q.get()
        assert q.hold(key, lambda: ran.append("first"))
        assert q.hold(key, fail)
        assert q.hold(key, lambda: ran.append("second"))
        assert ran == []
        q.done(key)
        return ran

    assert asyncio.run(scenario()) == ["first", "second"]


def test_a_change_made_between_an_apply_read_and_its_answer_wakes_the_tier() -> None:
    """The decision from an apply's answer may reuse what was worked out from the target as
    read (policy/answers.py): another's change made in between is in the answer, and its own
    event, older than the answer, wakes the tier again; the answer's echo closes the window."""

    async def scenario() -> list[list[Any]]:
        controller = Controller(Kube(client.ApiClient()))
        controller.cache.set_tier(KEY, tier(10))
        key = ("InferenceService", "ns", "srv")
        controller.cache.set_target(key, VERSION, target(5))
        controller.cache.note_applied(key, "5", "12")  # read at 5, answered 12
        controller.cache.remember_written(target(12))
        woken: list[list[Any]] = []
        for rv in (4, 8, 12, 9):  # older than the read, between, the echo, after the echo
            on_target(controller, "MODIFIED", target(rv))
            woken.append([])
            while len(controller.queue):
                woken[-1].append(await controller.queue.get())
                controller.queue.done(woken[-1][-1])
        return woken

    assert asyncio.run(scenario()) == [[], [KEY], [], []]


def volume(rv: int, phase: str | None, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": "pv-a",
            "resourceVersion": str(rv),
            "labels": {TIER_ID: tier_id(*KEY), **labels},
        },
        "spec": {"capacity": {"storage": "3Ti"}},
        "status": {"phase": phase} if phase else {},
    }


def test_a_volume_wakes_its_tier_only_for_what_a_decision_reads() -> None:
    """The controller manager moves a new PersistentVolume to Available: no decision tells that
    from Pending, so it wakes nothing (the cache keeps it); bound or released, relabelled or
    gone, it does."""

    async def scenario() -> list[tuple[str, list[Any]]]:
        controller = Controller(Kube(client.ApiClient()))
        controller.cache.set_tier(KEY, tier(10))
        steps = [
            ("ADDED", volume(20, None)),
            ("MODIFIED", volume(21, "Pending")),
            ("MODIFIED", volume(22, "Available")),
            ("MODIFIED", volume(23, "Bound")),
            ("MODIFIED", volume(24, "Bound", extra="x")),
            ("MODIFIED", volume(25, "Released", extra="x")),
            ("DELETED", volume(26, "Released", extra="x")),
        ]
        woken = []
        for event, obj in steps:
            on_owned(controller, event, obj)
            queued = []
            while len(controller.queue):
                queued.append(await controller.queue.get())
                controller.queue.done(queued[-1])
            woken.append((str((obj["status"] or {}).get("phase")), queued))
            if event != "DELETED":
                cached = controller.cache.owned_copy(obj)
                assert cached is not None and cached["metadata"]["resourceVersion"] == str(
                    obj["metadata"]["resourceVersion"]
                )
        return woken

    assert asyncio.run(scenario()) == [
        ("None", [KEY]),
        ("Pending", []),
        ("Available", []),
        ("Bound", [KEY]),
        ("Bound", [KEY]),
        ("Released", [KEY]),
        ("Released", [KEY]),
    ]
