"""What every reconcile runs in: the running operator's shared state and its loops.

kvtier's own informers feed the cache; a de-duplicating work queue hands keys to a few workers,
each running one reconcile at a time while this replica leads (it holds the Lease, or election
is off). Beside them: the periodic resync, the schema watch, the observer of the targets' vLLM
metrics and the Event sender. kopf only hosts the process (registration.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier import metrics
from kvtier.controller import collector
from kvtier.controller.cache import Cache, TierKey
from kvtier.controller.events import EventSender
from kvtier.controller.policy_reconciler import POLICY_KEY
from kvtier.controller.resync import RESYNC_SECONDS
from kvtier.controller.schemas import SchemaWatch
from kvtier.controller.workqueue import WorkQueue
from kvtier.controller.writer import Writer
from kvtier.kube.aio import AsyncKube
from kvtier.kube.informer import Informer
from kvtier.kube.rest import Kube, Request
from kvtier.observe.runner import Observer
from kvtier.policy.events import Event
from kvtier.render.event import event_body
from kvtier.targets.registry import KINDS, api_versions

log = logging.getLogger("kvtier.controller")


class Runtime:
    """Shared state of the running operator; `reconcile(key)` is the subclass's."""

    def __init__(
        self,
        kube: Kube,
        workers: int = 4,
        resync_seconds: float = RESYNC_SECONDS,
        aio: AsyncKube | None = None,
    ) -> None:
        if resync_seconds <= 0:
            raise ValueError(f"resync period must be positive, not {resync_seconds}")
        self.kube = kube
        # The reconciles' requests leave from the event loop; informers, the schema watch and
        # the observer keep the threads' client.
        self.aio = aio if aio is not None else AsyncKube(kube.api, kube.timeout)
        self.resync_seconds = resync_seconds
        self.cache = Cache()
        self.queue: WorkQueue[TierKey] = WorkQueue()
        metrics.QUEUE_DEPTH.set_function(lambda: len(self.queue))
        self.workers = workers
        self.instance = socket.gethostname()
        self.events = EventSender(self.aio)
        # Every write goes through it; it holds the writes the API server did not keep.
        self.writer = Writer(self.aio, self.cache)
        self._tasks: list[asyncio.Task[None]] = []
        self._sender: asyncio.Task[None] | None = None
        self.informers: list[Informer] = []
        # Set while this replica may act (it holds the Lease, or election is off).
        self.leading = asyncio.Event()
        # Reads the targets' vLLM metrics in the background; a result wakes its tier.
        self.observer = Observer(self._pods, self.queue.add)
        # A new CRD of a kind kvtier writes may keep what the old one pruned.
        self.schemas = SchemaWatch(
            self._openapi_index,
            self.schemas_changed,
            read_document=self._openapi_document,
            read_index_now=self._openapi_index_now,
        )

    def lead(self) -> None:
        """Became the acting replica: once the watches have delivered what exists,
        everything known may need work."""
        self._tasks.append(asyncio.create_task(self._lead_when_synced()))

    async def _lead_when_synced(self, timeout: float = 10.0) -> None:
        # Like controller-runtime's WaitForCacheSync: deciding on a half-filled cache would
        # report a target as missing only to correct it a moment later (two writes, an Event).
        needed = [i.synced for i in self.informers if i.watched.decides]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(synced.is_set() for synced in needed):
            await asyncio.sleep(0.05)
        collector.settled()
        self.leading.set()
        metrics.LEADER.set(1)
        self.queue.add(POLICY_KEY)
        self.enqueue(self.cache.tier_keys())

    def served_versions(self) -> dict[str, set[str]]:
        """Which of their registered versions the cluster serves for the target kinds and
        the kinds they read (API discovery, one request per group version)."""
        wanted: dict[str, set[str]] = {}  # group version → the kinds registered in it
        for kind in KINDS:
            for group_version in api_versions(kind):
                wanted.setdefault(group_version, set()).add(kind.kind)
            for related in kind.reads:
                wanted.setdefault(related.api_version, set()).add(related.kind)
        served: dict[str, set[str]] = {}
        for group_version, kinds in wanted.items():
            try:
                found = self.kube.request("GET", f"/apis/{group_version}")
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            for res in (found or {}).get("resources") or []:
                if "/" not in res.get("name", "") and res.get("kind") in kinds:
                    served.setdefault(str(res["kind"]), set()).add(group_version)
        return served

    def follow(self) -> None:
        self.leading.clear()
        metrics.LEADER.set(0)

    def start(self, informers: list[Informer]) -> None:
        """Watch (every replica, so a standby's cache is warm) and work the queue."""
        self.informers = informers
        for informer in informers:
            informer.start()
        self._tasks = [asyncio.create_task(self._worker(i)) for i in range(self.workers)]
        self._tasks.append(
            asyncio.create_task(
                self.observer.run(lambda: self.cache.tiers, lambda: self.cache.policy, self.leading)
            )
        )
        self._tasks.append(asyncio.create_task(self.schemas.run()))
        self._tasks.append(asyncio.create_task(self._resync()))
        self._sender = asyncio.create_task(self.events.run())

    async def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sender is not None:
            await self.events.flush(timeout=5.0)
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
        await self.aio.close()

    def _openapi_index(self) -> Mapping[str, Any]:
        index: Mapping[str, Any] = self.kube.request("GET", "/openapi/v3") or {}
        return index

    async def _openapi_index_now(self) -> Mapping[str, Any]:
        index: Mapping[str, Any] = await self.aio.send(Request("GET", "/openapi/v3")) or {}
        return index

    def _openapi_document(self, url: str) -> Mapping[str, Any]:
        path, _, query = url.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        document: Mapping[str, Any] = self.kube.request("GET", path, query=params) or {}
        return document

    async def _target_schemas(
        self, target: Mapping[str, Any] | None, fresh: bool = False
    ) -> dict[str, dict[str, Any]]:
        """The served schemas of the target's kind, by apiVersion ({} without a target).
        `fresh`: read the index first, so a CRD replaced since the last tick is seen."""
        if target is None:
            return {}
        api_version, kind = str(target.get("apiVersion")), str(target.get("kind"))
        if fresh:
            return await self.schemas.fresh_schemas_of(api_version, kind)
        known = self.schemas.cached_schemas_of(api_version, kind)
        if known is not None:
            return known
        return await asyncio.to_thread(self.schemas.schemas_of, api_version, kind)

    async def _target(self, tier: Mapping[str, Any]) -> dict[str, Any] | None:
        """The target as the tier's version shows it; a version no watch feeds is read."""
        version = self.cache.unwatched_version(tier)
        if version is not None:
            meta, ref = tier["metadata"], tier["spec"]["targetRef"]
            view = await self.aio.get(version, ref["kind"], ref["name"], meta["namespace"])
            key = (ref["kind"], meta["namespace"], ref["name"])
            if view is None:  # that version is not served (any more): no target
                self.cache.forget_view(key, version)
            else:
                self.cache.set_target(key, version, view)
        return self.cache.target_for(tier)

    def schemas_changed(self, groups: set[str]) -> None:
        """Writes held back because a schema did not keep them get another try, and every
        tier is looked at again (its target's schema may now take what it could not)."""
        self.writer.release_unkept(groups)
        self.enqueue(self.cache.tier_keys())

    async def _resync(self) -> None:
        """Every period, the policy and every tier are queued again (while this replica
        leads); the queue merges them with work already pending."""
        while True:
            await asyncio.sleep(self.resync_seconds)
            if self.leading.is_set():
                self.queue.add(POLICY_KEY)
                self.enqueue(self.cache.tier_keys())
                metrics.RESYNCS.inc()

    def _pods(self, namespace: str) -> list[dict[str, Any]]:
        return self.kube.list("v1", "Pod", namespace)

    def enqueue(self, keys: list[TierKey]) -> None:
        for key in keys:
            self.queue.add(key)

    async def _worker(self, index: int) -> None:
        while True:
            await self.leading.wait()
            key = await self.queue.get()
            if not self.leading.is_set():  # lost the Lease meanwhile: keep it for later
                self.queue.done(key)
                self.queue.add(key)
                continue
            started = time.monotonic()
            result = "success"
            try:
                await self.reconcile(key)
                self.queue.forget(key)
            except ApiException as exc:
                result = "conflict" if exc.status == 409 else "error"
                if exc.status == 409:
                    self.queue.add_after(key, 0.2)
                else:
                    delay = self.queue.retry(key)
                    log.warning(
                        "reconcile %s/%s failed (%s); retry in %.1fs", *key, exc.status, delay
                    )
            except Exception:
                result = "error"
                delay = self.queue.retry(key)
                log.exception("reconcile %s/%s failed; retry in %.1fs", *key, delay)
            finally:
                self.queue.done(key)
                metrics.RECONCILES.labels(result).inc()
                metrics.RECONCILE_SECONDS.labels(result).observe(time.monotonic() - started)
                if result == "error":
                    metrics.LAST_ERROR.set(time.time())

    def _event(self, obj: Mapping[str, Any], event: Event) -> None:
        self.events.send(
            event_body(
                obj, event.type, event.reason, event.message, self.instance, datetime.now(UTC)
            )
        )

    async def reconcile(self, key: TierKey) -> None:
        raise NotImplementedError
