"""Events leave the reconcile path, as client-go's recorder does: a reconcile queues its
Events and goes on; one task sends them in order. An Event is best effort (the status holds
the same facts), so a full queue, a tier over its Event budget or a refused write drops it
with a log line and a metric.

The same cause told again (same object, type, reason, message and source: a missing target
is both TargetFound's and Ready's reason) is counted on the Event already recorded, as
client-go's EventCorrelator does: a PATCH of its count and lastTimestamp, not a new Event."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier import metrics
from kvtier.kube.aio import AsyncKube

log = logging.getLogger("kvtier.events")


@dataclass
class EventBudget:
    """client-go's spam filter: per tier, a burst of Events, then one per refill period. A
    tool that fights kvtier forever (a GitOps self-heal re-applying a target) then costs one
    write per round, the target patch, not two."""

    burst: int = 25
    refill_seconds: float = 300.0
    _buckets: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def allow(self, key: tuple[str, str], now: float) -> bool:
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) / self.refill_seconds)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        return allowed

    def forget(self, key: tuple[str, str]) -> None:
        self._buckets.pop(key, None)


# How many causes are remembered for counting (client-go's maxLruCacheEntries).
SEEN_KEPT = 4096
EventKey = tuple[str, ...]


def event_key(body: dict[str, Any]) -> EventKey:
    """What makes two Events the same cause, as client-go's getEventKey: the source, the
    object (not its resourceVersion), type, reason and message."""
    obj = body["involvedObject"]
    source = body.get("source") or {}
    return tuple(
        str(v or "")
        for v in (
            source.get("component"),
            source.get("host"),
            obj.get("kind"),
            obj.get("namespace"),
            obj.get("name"),
            obj.get("uid"),
            obj.get("apiVersion"),
            body.get("type"),
            body.get("reason"),
            body.get("message"),
        )
    )


class EventSender:
    def __init__(
        self, kube: AsyncKube, capacity: int = 1000, budget: EventBudget | None = None
    ) -> None:
        self.kube = kube
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(capacity)
        self.budget = budget or EventBudget()
        # cause → (the name of its Event, its count), the least recently told first.
        self.seen: OrderedDict[EventKey, tuple[str, int]] = OrderedDict()

    def send(self, body: dict[str, Any]) -> None:
        obj = body["involvedObject"]
        if not self.budget.allow((obj["namespace"], obj["name"]), time.monotonic()):
            self._dropped(body, "over the tier's Event budget")
            return
        try:
            self.queue.put_nowait(body)
        except asyncio.QueueFull:
            self._dropped(body, "queue full")

    async def run(self) -> None:
        while True:
            body = await self.queue.get()
            try:
                await self._record(body)
            except Exception as exc:  # the API may be restarting: never stop sending
                self._dropped(body, str(getattr(exc, "status", None) or type(exc).__name__))
            finally:
                self.queue.task_done()

    async def _record(self, body: dict[str, Any]) -> None:
        """Count the cause on its Event if one was recorded, else create one."""
        key = event_key(body)
        seen = self.seen.get(key)
        if seen is not None:
            name, count = seen
            patch = {"count": count + 1, "lastTimestamp": body["lastTimestamp"]}
            namespace = body["metadata"]["namespace"]
            try:
                await self.kube.merge_patch("v1", "Event", name, namespace, patch)
                metrics.WRITES.labels("patch", "Event").inc()
                self._remember(key, name, count + 1)
                return
            except ApiException as exc:
                if exc.status != 404:  # gone (Events expire after an hour): record it anew
                    raise
                del self.seen[key]
        created = await self.kube.create(body)
        metrics.WRITES.labels("create", "Event").inc()
        name = str(((created or {}).get("metadata") or {}).get("name") or "")
        if name:
            self._remember(key, name, int(body.get("count") or 1))

    def _remember(self, key: EventKey, name: str, count: int) -> None:
        self.seen[key] = (name, count)
        self.seen.move_to_end(key)
        while len(self.seen) > SEEN_KEPT:
            self.seen.popitem(last=False)

    async def flush(self, timeout: float) -> None:
        """Wait (a bounded time) for the queued Events to go out, as on shutdown."""
        try:
            await asyncio.wait_for(self.queue.join(), timeout)
        except TimeoutError:
            log.warning("%d event(s) not sent before shutdown", self.queue.qsize())

    @staticmethod
    def _dropped(body: dict[str, Any], why: str) -> None:
        metrics.EVENTS_DROPPED.inc()
        obj = body["involvedObject"]
        log.warning(
            "event %s for %s/%s not recorded: %s",
            body["reason"],
            obj["namespace"],
            obj["name"],
            why,
        )
