"""Events go out off the reconcile path, in order, under the operator's identity; a full
queue or a refused write drops one Event and never stops the sender."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from kubernetes import client
from prometheus_client import REGISTRY

from kvtier.controller.events import EventBudget, EventSender
from kvtier.kube.rest import Kube
from kvtier.render.event import event_body
from tests.e2e.kube_helpers import events_for, new_namespace

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
        sender = EventSender(Kube(operator_api), capacity=4)
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
        sender = EventSender(Kube(operator_api), budget=EventBudget(burst=2))
        task = asyncio.create_task(sender.run())
        for i in range(5):
            sender.send(event_body(_tier(ns, "noisy"), "Normal", f"Round{i}", "m", "i", NOW))
        sender.send(event_body(_tier(ns, "calm"), "Normal", "Once", "m", "i", NOW))
        await sender.flush(timeout=30)
        task.cancel()

    asyncio.run(scenario())
    assert sorted(e.reason for e in events_for(admin_api, ns, "noisy")) == ["Round0", "Round1"]
    assert [e.reason for e in events_for(admin_api, ns, "calm")] == ["Once"]
    assert _dropped() - before == 3
