"""Events leave the reconcile path, as client-go's recorder does: a reconcile queues its
Events and goes on; one task sends them in order. An Event is best effort (the status holds
the same facts), so a full queue, a tier over its Event budget or a refused write drops it
with a log line and a metric."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kvtier import metrics
from kvtier.kube.rest import Kube

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


class EventSender:
    def __init__(self, kube: Kube, capacity: int = 1000, budget: EventBudget | None = None) -> None:
        self.kube = kube
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(capacity)
        self.budget = budget or EventBudget()

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
                await asyncio.to_thread(self.kube.create, body)
                metrics.WRITES.labels("create", "Event").inc()
            except Exception as exc:  # the API may be restarting: never stop sending
                self._dropped(body, str(getattr(exc, "status", None) or type(exc).__name__))
            finally:
                self.queue.task_done()

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
