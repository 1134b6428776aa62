"""Events go out off the reconcile path, in order, under the operator's identity; a full
queue or a refused write drops one Event and never stops the sender; the same cause told
again is counted on its Event, one Event per cause."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

from kubernetes import client
from prometheus_client import REGISTRY

from kvtier.controller.events import EventBudget, EventSender
from kvtier.kube.aio import AsyncKube
from kvtier.render.event import event_body
from tests.e2e.kube_helpers import (
    create_tier,
    events_for,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _dropped() -> float:
    return REGISTRY.get_sample_value("kvtier_events_dropped_total") or 0.0


def _tier(ns: str, name: str) -> dict[str, object]:
    return {"metadata": {"namespace": ns, "name": name, "uid": "u-1", "resourceVersion": "7"}}


def test_sender_delivers_in_order_and_drops_what_it_cannot_send(
    admin_api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    ns = new_namespace(admin_api, "events")
    before = _dropped()

    async def scenario() -> None:
        sender = EventSender(AsyncKube(operator_api), capacity=4)
        for i in range(3):
            sender.send(event_body(_tier(ns, "t"), "Normal", f"Step{i}", "m", "i", NOW))
        # A namespace that does not exist: the API refuses it, the sender goes on.
        sender.send(event_body(_tier("no-such-ns-x", "t"), "Normal", "Lost", "m", "i", NOW))
        sender.send(event_body(_tier(ns, "t"), "Normal", "Overflow", "m", "i", NOW))  # full
        task = asyncio.create_task(sender.run())
        await sender.flush(timeout=30)
        sender.send(event_body(_tier(ns, "t"), "Warning", "After", "m", "i", NOW))
        await sender.flush(timeout=30)
        task.cancel()
        await sender.kube.close()

    asyncio.run(scenario())
    # resourceVersions come from one etcd revision counter: they order the creates.
    events = sorted(
        events_for(admin_api, ns, "t"), key=lambda e: int(e.metadata.resource_version or 0)
    )
    assert [e.reason for e in events] == ["Step0", "Step1", "Step2", "After"]
    assert {e.reporting_component for e in events} == {"kvtier-operator"}
    assert _dropped() - before == 2  # the refused one and the overflow


def test_a_tier_over_its_budget_records_no_more(
    admin_api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    ns = new_namespace(admin_api, "events")
    before = _dropped()

    async def scenario() -> None:
        sender = EventSender(AsyncKube(operator_api), budget=EventBudget(burst=2))
        task = asyncio.create_task(sender.run())
        for i in range(5):
            sender.send(event_body(_tier(ns, "noisy"), "Normal", f"Round{i}", "m", "i", NOW))
        sender.send(event_body(_tier(ns, "calm"), "Normal", "Once", "m", "i", NOW))
        await sender.flush(timeout=30)
        task.cancel()
        await sender.kube.close()

    asyncio.run(scenario())
    assert sorted(e.reason for e in events_for(admin_api, ns, "noisy")) == ["Round0", "Round1"]
    assert [e.reason for e in events_for(admin_api, ns, "calm")] == ["Once"]
    assert _dropped() - before == 3


def test_the_same_cause_is_counted_on_its_event(
    admin_api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    """As client-go's correlator: one Event per (object, type, reason, message), its count
    and lastTimestamp raised by each repeat; another message is another Event; an Event gone
    (expired) is recorded anew."""
    ns = new_namespace(admin_api, "events")
    later = NOW + timedelta(seconds=30)

    same = [event_body(_tier(ns, "t"), "Warning", "TargetNotFound", "gone", "i", NOW)] * 2
    same.append(event_body(_tier(ns, "t"), "Warning", "TargetNotFound", "gone", "i", later))
    other = event_body(_tier(ns, "t"), "Warning", "TargetNotFound", "elsewhere", "i", NOW)

    def counts() -> dict[str, client.CoreV1Event]:
        return {str(e.message): e for e in events_for(admin_api, ns, "t")}

    async def scenario() -> dict[str, client.CoreV1Event]:
        sender = EventSender(AsyncKube(operator_api))
        task = asyncio.create_task(sender.run())
        for body in [*same, other]:
            sender.send(body)
        await sender.flush(timeout=30)
        first = counts()
        name = str(first["gone"].metadata.name)
        await asyncio.to_thread(client.CoreV1Api(admin_api).delete_namespaced_event, name, ns)
        sender.send(same[0])
        await sender.flush(timeout=30)
        task.cancel()
        await sender.kube.close()
        return first

    first = asyncio.run(scenario())
    assert {m: e.count for m, e in first.items()} == {"gone": 3, "elsewhere": 1}
    assert first["gone"].first_timestamp == NOW and first["gone"].last_timestamp == later
    assert {m: e.count for m, e in counts().items()} == {"gone": 1, "elsewhere": 1}


def test_a_missing_target_is_one_event_per_cause(
    admin_api: client.ApiClient, operator: OperatorProcess
) -> None:
    """A tier whose target does not exist: TargetFound and Ready both say TargetNotFound with
    the same message, which is one Warning Event counted twice, not two Events."""
    ns = new_namespace(admin_api, "events")
    spec = {
        "mode": "Apply",
        "targetRef": {"kind": "InferenceService", "name": "not-there"},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
    }
    create_tier(admin_api, ns, "lost", spec)
    wait_condition(admin_api, ns, "lost", "Ready", "False", "TargetNotFound")

    def recorded() -> list[client.CoreV1Event]:
        events = events_for(admin_api, ns, "lost")
        return events if sum(e.count or 0 for e in events) >= 2 else []

    events = eventually(recorded, timeout=30, what="the tier's Events")
    per_cause = Counter((e.type, e.reason, e.message) for e in events)
    assert set(per_cause.values()) == {1}, per_cause
    [lost] = [e for e in events if e.reason == "TargetNotFound"]
    assert (lost.type, lost.count) == ("Warning", 2)
    assert "spec.targetRef: InferenceService" in lost.message
