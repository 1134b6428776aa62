"""Reconcile one KVCacheTier: read facts from the cache, decide, write only what changed."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier import metrics
from kvtier.api.tier import API_VERSION
from kvtier.controller.cache import VERSION_PREFERENCE, Cache, TierKey
from kvtier.controller.events import EventSender
from kvtier.controller.schemas import SchemaWatch
from kvtier.controller.workqueue import WorkQueue
from kvtier.kube.informer import Informer
from kvtier.kube.rest import Kube
from kvtier.names import FINALIZER
from kvtier.observe.runner import Observer
from kvtier.policy.decide import (
    DEFAULT_PROBE_IMAGE,
    Decision,
    Event,
    Facts,
    announce,
    claim_key,
    decide,
)
from kvtier.policy.policy_ready import policy_ready
from kvtier.policy.provisioning import (
    Unkept,
    UnkeptKey,
    object_key,
    pending_writes,
    policy_writes,
    removal_writes,
    unkept_write,
)
from kvtier.policy.replica1 import OWNED_KINDS as REPLICA1_KINDS
from kvtier.policy.replica1 import RECHECK_SECONDS as REPLICA1_RECHECK_SECONDS
from kvtier.policy.replica1 import SELECTOR as REPLICA1_SELECTOR
from kvtier.policy.replica1 import filesystem_refused, policy_status_patch, policy_step
from kvtier.policy.scheduler import removal_configmap_writes
from kvtier.render import DesiredWrite
from kvtier.render.event import event_body
from kvtier.render.naming import tier_id
from kvtier.render.scheduler import config_ref

log = logging.getLogger("kvtier.controller")
STATUS_KEYS = (
    "observedGeneration",
    "cpuTier",
    "diskTier",
    "mode",
    "sizing",
    "tiers",
    "plan",
    "effective",
    "observed",
    "conditions",
)


def prune(value: Any) -> Any:
    """Drop None values recursively: the shape the API server stores."""
    if isinstance(value, Mapping):
        return {k: prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune(v) for v in value]
    return value


def status_patch(
    current: Mapping[str, Any] | None, desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The merge patch that turns `current` into `desired`, or None when they already agree."""
    current = current or {}
    want = {k: prune(desired.get(k)) for k in STATUS_KEYS}
    if all(want[k] == current.get(k) for k in STATUS_KEYS):
        return None
    # Whole keys are replaced: merge patch replaces lists anyway, and None removes a key.
    return {k: want[k] for k in STATUS_KEYS if want[k] != current.get(k)}


POLICY_KEY: TierKey = ("", "KVCachePolicy")  # tiers always have a namespace
PENDING_RETRY_SECONDS = 1.0
# A scheduler ConfigMap that answered 403 is not written again for this long, unless it
# changes: the grant (a Role kvtier cannot watch) is looked for again after it.
FORBIDDEN_RETRY_SECONDS = 300.0


class Controller:
    """Shared state of the running operator."""

    def __init__(self, kube: Kube, workers: int = 4, probe_image: str | None = None) -> None:
        self.kube = kube
        self.probe_image = probe_image or DEFAULT_PROBE_IMAGE
        self.cache = Cache()
        self.queue: WorkQueue[TierKey] = WorkQueue()
        self.workers = workers
        self.instance = socket.gethostname()
        self.events = EventSender(kube)
        self._tasks: list[asyncio.Task[None]] = []
        self._sender: asyncio.Task[None] | None = None
        self.informers: list[Informer] = []
        # Set while this replica may act (it holds the Lease, or election is off).
        self.leading = asyncio.Event()
        # Writes the API server did not keep, by object: held back until it changes.
        self.unkept: dict[UnkeptKey, Unkept] = {}
        # Scheduler ConfigMaps kvtier may not patch: (namespace, name) → (resourceVersion,
        # when the 403 came).
        self.forbidden: dict[TierKey, tuple[str | None, float]] = {}
        # Reads the targets' vLLM metrics in the background; a result wakes its tier.
        self.observer = Observer(self._pods, self.queue.add)
        # A new CRD of a kind kvtier writes may keep what the old one pruned.
        self.schemas = SchemaWatch(
            self._openapi_index, self.schemas_changed, read_document=self._openapi_document
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
        self.leading.set()
        self.queue.add(POLICY_KEY)
        self.enqueue(self.cache.tier_keys())

    def served_versions(self) -> dict[str, set[str]]:
        """Which versions of the target kinds this cluster serves (API discovery)."""
        served: dict[str, set[str]] = {}
        for group_version in VERSION_PREFERENCE:
            try:
                found = self.kube.request("GET", f"/apis/{group_version}")
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            for res in (found or {}).get("resources") or []:
                if "/" not in res.get("name", ""):
                    served.setdefault(str(res.get("kind")), set()).add(group_version)
        return served

    def follow(self) -> None:
        self.leading.clear()

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

    def _openapi_index(self) -> Mapping[str, Any]:
        index: Mapping[str, Any] = self.kube.request("GET", "/openapi/v3") or {}
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
        if fresh:
            self.schemas.index = None
        return await asyncio.to_thread(
            self.schemas.schemas_of, str(target.get("apiVersion")), str(target.get("kind"))
        )

    def schemas_changed(self, groups: set[str]) -> None:
        """Writes held back because a schema did not keep them get another try, and every
        tier is looked at again (its target's schema may now take what it could not)."""
        for key, unkept in list(self.unkept.items()):
            if unkept.group in groups:
                del self.unkept[key]
        self.enqueue(self.cache.tier_keys())

    def _forget_unkept(self, obj: Mapping[str, Any] | None) -> None:
        """Drop the memo of writes to an object kvtier no longer writes (its tier is gone)."""
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        where = (obj.get("kind"), meta.get("namespace"), meta.get("name"))
        for key in [k for k in self.unkept if k[:3] == where]:
            del self.unkept[key]

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

    async def reconcile(self, key: TierKey) -> None:
        if key == POLICY_KEY:
            await self._reconcile_policy()
            return
        namespace, name = key
        tier = self.cache.tiers.get(key)
        if tier is None:
            metrics.forget_tier(namespace, name)
            self.observer.forget(key)
            self.events.budget.forget(key)
            return
        if (tier.get("metadata") or {}).get("deletionTimestamp"):
            await self._take_back(tier, deleting=True)
            return
        config_map = self.cache.configmap_for(tier)
        ref = ((tier.get("spec") or {}).get("model") or {}).get("configMapRef")
        if ref and config_map is None:
            config_map = await asyncio.to_thread(
                self.kube.get, "v1", "ConfigMap", ref["name"], namespace
            )
            if config_map is not None:
                self.cache.configmaps[(namespace, ref["name"])] = config_map
        target = await self._target(tier)
        schedulers = await self._scheduler_configmaps(key, target)
        facts = Facts(
            tier=tier,
            policy=self.cache.policy,
            target=target,
            config_map=config_map,
            nodes=list(self.cache.nodes.values()),
            now=datetime.now(UTC),
            owned=self.cache.owned_for(namespace, name),
            probe_image=self.probe_image,
            rivals=self._rivals(key, tier),
            unkept=self.unkept,
            observation=self.observer.results.get(key),
            storage_classes=dict(self.cache.storage_classes),
            capacities=list(self.cache.capacities.values()),
            scheduler_configmaps=schedulers,
            scheduler_forbidden=self._forbidden(schedulers),
            llmisvc_configs=self._llmisvc_configs(target),
            kserve_namespace=self.cache.kserve_namespace,
            target_schemas=await self._target_schemas(target),
        )
        decision = decide(facts)
        if target is not None and any(
            w.action == "Apply" and w.kind == target.get("kind") for w in decision.writes
        ):
            # About to apply to the target: its schema as served right now, not as of the
            # last tick (a CRD replaced meanwhile may make the apply replace the user's spec).
            schemas = await self._target_schemas(target, fresh=True)
            if schemas != facts.target_schemas:
                facts = replace(facts, target_schemas=schemas)
                decision = decide(facts)
        finalizers = (tier.get("metadata") or {}).get("finalizers") or []
        written: list[DesiredWrite] = []
        if decision.mode == "Apply" and decision.writes:
            if FINALIZER not in finalizers:
                await self._set_finalizer(tier, present=True)
            written = await self._perform(tier, decision.writes, announce_done=False)
            # The API returned what it now holds: decide again from that, so one status
            # write reports the result instead of a second pass after the watch catches up.
            tier = self.cache.tiers.get(key, tier)  # the finalizer write moved it on
            target = self.cache.target_for(tier)
            schedulers = await self._scheduler_configmaps(key, target)
            facts = replace(
                facts,
                tier=tier,
                target=target,
                owned=self.cache.owned_for(namespace, name),
                scheduler_configmaps=schedulers,
                scheduler_forbidden=self._forbidden(schedulers),
                llmisvc_configs=self._llmisvc_configs(target),
            )
            decision = decide(facts)
        elif decision.mode != "Apply" and FINALIZER in finalizers:
            await self._take_back(tier, deleting=False)  # Apply → Plan
        for w in decision.held:
            metrics.WRITES_HELD.labels(w.kind).inc()
        try:
            if decision.mode == "Apply" and decision.probe is not None:
                await self._probe(tier, decision)
            # Before the status write: whoever sees the new status also sees its metrics.
            metrics.observe_tier(namespace, name, tier, decision.status)
            updated = await self._write_status(tier, decision)
        except BaseException:
            self._announce(tier, [], written)  # they happened; the rest is retried
            raise
        self._announce(updated or tier, decision.events, written)
        if written and decision.writes:
            # The API's responses carried changes others made meanwhile (their own watch
            # events are then no longer news, see cache.is_news), and they need more writes:
            # another round's work, as nothing else will wake the tier for them.
            self.queue.add_after(key, PENDING_RETRY_SECONDS)

    def _llmisvc_configs(
        self, target: Mapping[str, Any] | None
    ) -> dict[tuple[str, str], dict[str, Any]] | None:
        """The LLMInferenceServiceConfigs the watch holds for an LLMInferenceService target
        (its picker's version comes from them); None for other targets."""
        if target is None or target.get("kind") != "LLMInferenceService":
            return None
        return self.cache.llmisvc_configs_for(target)

    async def _scheduler_configmaps(
        self, key: TierKey, target: Mapping[str, Any] | None
    ) -> list[dict[str, Any]]:
        """The ConfigMaps of the tier's namespace its scheduler sync reads: the one the
        target's config.ref names (read once if no watch event brought it yet) and those
        carrying the tier's record."""
        found = self.cache.scheduler_configmaps(key)
        ref = config_ref(target) if target is not None else None
        where = (key[0], ref[0]) if ref is not None else None
        if where is not None and where not in found:
            configmap = self.cache.configmaps.get(where)
            if configmap is None:
                configmap = await asyncio.to_thread(self.kube.get, "v1", "ConfigMap", *where[::-1])
                if configmap is not None:
                    self.cache.set_configmap(configmap, deleted=False)
            if configmap is not None:
                found[where] = configmap
        return [found[k] for k in sorted(found)]

    def _forbidden(self, configmaps: list[dict[str, Any]]) -> frozenset[str]:
        """Names of the ConfigMaps that answered 403 and have not changed since, within
        FORBIDDEN_RETRY_SECONDS."""
        names = set()
        now = time.monotonic()
        for configmap in configmaps:
            meta = configmap.get("metadata") or {}
            seen = self.forbidden.get((str(meta.get("namespace")), str(meta.get("name"))))
            if (
                seen
                and seen[0] == meta.get("resourceVersion")
                and now - seen[1] < FORBIDDEN_RETRY_SECONDS
            ):
                names.add(str(meta.get("name")))
        return frozenset(names)

    def _forbid(self, tier: Mapping[str, Any], w: DesiredWrite) -> None:
        """A scheduler ConfigMap patch answered 403: not again until it changes or the
        retry time passed (the tier is woken then)."""
        where = (str(w.namespace), w.name)
        current = self.cache.configmaps.get(where) or {}
        version = (current.get("metadata") or {}).get("resourceVersion")
        self.forbidden[where] = (version, time.monotonic())
        meta = tier["metadata"]
        self.queue.add_after((meta["namespace"], meta["name"]), FORBIDDEN_RETRY_SECONDS)
        log.info("ConfigMap %s/%s: kvtier may not patch it (403)", *where)

    async def _target(self, tier: Mapping[str, Any]) -> dict[str, Any] | None:
        """The target as the tier's version shows it; a version no watch feeds is read."""
        version = self.cache.unwatched_version(tier)
        if version is not None:
            meta, ref = tier["metadata"], tier["spec"]["targetRef"]
            view = await asyncio.to_thread(
                self.kube.get, version, ref["kind"], ref["name"], meta["namespace"]
            )
            key = (ref["kind"], meta["namespace"], ref["name"])
            if view is None:  # that version is not served (any more): no target
                self.cache.forget_view(key, version)
            else:
                self.cache.set_target(key, version, view)
        return self.cache.target_for(tier)

    def _rivals(self, key: TierKey, tier: Mapping[str, Any]) -> list[tuple[int, str, str]]:
        """Other Apply-mode tiers naming the same target, as claim keys."""
        ref = (tier.get("spec") or {}).get("targetRef") or {}
        default = ((self.cache.policy or {}).get("spec") or {}).get("defaults") or {}
        rivals = []
        for other in self.cache.tiers_for_target(ref.get("kind", ""), key[0], ref.get("name", "")):
            body = self.cache.tiers.get(other)
            if other == key or body is None:
                continue
            mode = (body.get("spec") or {}).get("mode") or default.get("mode") or "Apply"
            meta = body.get("metadata") or {}
            if mode == "Apply" and not meta.get("deletionTimestamp"):
                rivals.append(claim_key(body))
        return rivals

    async def _perform(
        self, tier: Mapping[str, Any], writes: list[DesiredWrite], announce_done: bool = True
    ) -> list[DesiredWrite]:
        """Apply or delete in order; stop at the first failure (the retry starts over, and
        the target patch comes last, so a model server never points at missing storage).
        One Event tells what was written: here, or by the caller when `announce_done` is
        False and all went through (a failure part-way is always told here)."""
        done: list[DesiredWrite] = []
        generations: dict[tuple[str, str | None, str], Any] = {}
        try:
            for w in writes:
                if w.action == "Delete":
                    await asyncio.to_thread(
                        self.kube.delete, w.api_version, w.kind, w.name, w.namespace
                    )
                    metrics.WRITES.labels("delete", w.kind).inc()
                    self.cache.forget_written(w.kind, w.namespace, w.name)
                else:
                    try:
                        written = await self._send(w)
                    except ApiException as exc:
                        if exc.status != 403 or w.kind != "ConfigMap":
                            raise
                        self._forbid(tier, w)  # the condition says how to grant it
                        continue
                    key = (w.kind, w.namespace, w.name, w.action)
                    unkept = unkept_write(w, written)
                    if unkept is None:
                        self.unkept.pop(key, None)
                    else:
                        self.unkept[key] = unkept
                        log.warning(
                            "%s %s: the API server did not keep %s; holding this write back",
                            w.kind,
                            w.name,
                            ", ".join(unkept.paths),
                        )
                    if written:
                        self.cache.remember_written(written)
                        generations[key[:3]] = (written.get("metadata") or {}).get("generation")
                done.append(w)
        except BaseException:
            self._announce(tier, [], done)
            raise
        finally:
            # kvtier's own later writes to an object do not count as a change to it.
            for held, unkept in list(self.unkept.items()):
                if held[:3] in generations:
                    self.unkept[held] = replace(unkept, generation=generations[held[:3]])
        if announce_done:
            self._announce(tier, [], done)
        return done

    async def _send(self, w: DesiredWrite) -> Any:
        """One Apply or Patch. A Patch whose guard failed (the object changed since it was
        read: 422 from a `test` op, or 409) refreshes the cached object before the error
        goes up, so the retry renders from what the server holds."""
        if w.action == "Apply":
            written = await asyncio.to_thread(self.kube.apply, w.body)
            metrics.WRITES.labels("apply", w.kind).inc()
            return written
        try:
            ops = w.body["jsonPatch"]
            written = await asyncio.to_thread(
                self.kube.json_patch, w.api_version, w.kind, w.name, w.namespace, ops
            )
        except ApiException as exc:
            if exc.status in (409, 422):
                fresh = await asyncio.to_thread(
                    self.kube.get, w.api_version, w.kind, w.name, w.namespace
                )
                if fresh:
                    self.cache.remember_written(fresh)
            raise
        finally:
            metrics.WRITES.labels("patch", w.kind).inc()
        return written

    async def _probe(self, tier: Mapping[str, Any], decision: Decision) -> None:
        """Start, collect and clean up the tier's fio probe Job as decided."""
        step = decision.probe
        assert step is not None
        meta = tier["metadata"]
        key = (meta["namespace"], meta["name"])
        for name in step.delete:
            await asyncio.to_thread(self.kube.delete, "batch/v1", "Job", name, meta["namespace"])
            metrics.WRITES.labels("delete", "Job").inc()
        if step.create is not None:
            try:
                await asyncio.to_thread(self.kube.create, step.create)
                metrics.WRITES.labels("create", "Job").inc()
                metrics.PROBE_RUNS.inc()
                self._event(
                    tier,
                    Event("Normal", "Probing", f"fio probe Job {step.create['metadata']['name']}"),
                )
            except ApiException as exc:
                if exc.status != 409:  # already there: an earlier reconcile created it
                    raise
        if step.finished == "failed":
            metrics.PROBE_FAILURES.inc()
        if step.finished is not None and step.verdict is not None:
            kind = "Normal" if step.finished == "succeeded" else "Warning"
            self._event(tier, Event(kind, step.verdict.reason, step.verdict.message))
        if step.requeue_after is not None:
            self.queue.add_after(key, step.requeue_after)

    async def _set_finalizer(self, tier: Mapping[str, Any], present: bool) -> None:
        meta = tier["metadata"]
        body = {
            "apiVersion": API_VERSION,
            "kind": "KVCacheTier",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                # Applying without the entry drops kvtier's ownership, so it goes.
                **({"finalizers": [FINALIZER]} if present else {}),
            },
        }
        try:
            updated = await asyncio.to_thread(self.kube.apply, body)
        except ApiException as exc:
            if exc.status != 404 or present:
                raise
            updated = None
        metrics.WRITES.labels("apply", "KVCacheTier").inc()
        key = (meta["namespace"], meta["name"])
        if updated and key in self.cache.tiers:
            self.cache.set_tier(key, updated)  # fresher than the watch, as after status writes

    async def _take_back(self, tier: Mapping[str, Any], deleting: bool) -> None:
        """Remove exactly what kvtier applied: the target's fields, owned storage (unless
        retained); then release the finalizer. A target or namespace already gone does not
        block: there is nothing to take back from it."""
        meta = tier["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        owned = self.cache.owned_for(namespace, name)
        target = await self._target(tier)
        retention = self._claim_retention(tier)
        # Pods go with their Job; kvtier never deletes pods itself.
        removable = [o for o in owned.values() if o.get("kind") != "Pod"]
        writes = removal_writes(target, removable, delete_claims=retention == "Delete")
        schedulers = await self._scheduler_configmaps((namespace, name), None)
        writes += removal_configmap_writes(schedulers, tier_id(namespace, name))
        observed = {**owned}
        if target is not None:
            observed[object_key(target)] = target
        todo = [w for w in writes if w.action != "Delete"] + pending_writes(
            [w for w in writes if w.action == "Delete"], observed
        )
        try:
            await self._perform(tier, todo)
        except ApiException as exc:
            if exc.status != 404:
                raise
        await self._set_finalizer(tier, present=False)
        self._forget_unkept(target)
        for obj in owned.values():
            self._forget_unkept(obj)
        if deleting:
            metrics.forget_tier(namespace, name)

    def _claim_retention(self, tier: Mapping[str, Any]) -> str:
        policy = (self.cache.policy or {}).get("spec") or {}
        return str(policy.get("storageRetention") or "Delete")

    async def _reconcile_policy(self) -> None:
        """Cluster-scoped objects only the policy can cause (never a namespaced tier): the
        NVMe pools' classes and the replica-1 pool (kvtier's CephFilesystem, then its class
        once Rook reports it Ready); its condition goes to the policy's status."""
        policy = self.cache.policy
        observed: dict[tuple[str, str | None, str], Any] = {}
        for w in policy_writes(policy):
            current = await asyncio.to_thread(
                self.kube.get, w.api_version, w.kind, w.name, w.namespace
            )
            if current is not None:
                observed[(w.kind, w.namespace, w.name)] = current
        owned: list[dict[str, Any]] = []
        for api_version, kind in REPLICA1_KINDS:
            try:
                found = await asyncio.to_thread(
                    self.kube.list, api_version, kind, None, REPLICA1_SELECTOR
                )
            except ApiException as exc:
                if exc.status != 404:  # no Rook CRD on this cluster: nothing of kvtier's
                    raise
                continue
            # A LIST's items carry no kind of their own.
            owned += [{**o, "apiVersion": api_version, "kind": kind} for o in found]
        step = policy_step(policy, observed, owned)
        verdict = step.verdict
        for w in step.writes:
            if w.action == "Delete":
                await asyncio.to_thread(
                    self.kube.delete, w.api_version, w.kind, w.name, w.namespace
                )
                metrics.WRITES.labels("delete", w.kind).inc()
            else:
                try:
                    await asyncio.to_thread(self.kube.apply, w.body)
                except ApiException as exc:
                    if exc.status != 404 or w.kind != "CephFilesystem":
                        raise
                    verdict = filesystem_refused(w)  # no such namespace, or no Rook CRD
                    # Nothing watched announces them: look again later.
                    self.queue.add_after(POLICY_KEY, REPLICA1_RECHECK_SECONDS)
                    continue
                metrics.WRITES.labels("apply", w.kind).inc()
            log.info("policy: %s", w.summary)
        if verdict is not None and not verdict.ok:
            log.info("policy: %s %s: %s", verdict.type, verdict.reason, verdict.message)
        patch = None
        if policy:
            ready = policy_ready(policy.get("spec"), verdict)
            patch = policy_status_patch(policy, verdict, datetime.now(UTC), ready)
        if patch is not None and policy is not None:
            meta = policy["metadata"]
            updated = await asyncio.to_thread(
                self.kube.patch_status,
                API_VERSION,
                "KVCachePolicy",
                meta["name"],
                None,
                patch,
                meta.get("resourceVersion"),
            )
            metrics.WRITES.labels("patch", "KVCachePolicy/status").inc()
            if updated:
                self.cache.policy = updated

    async def _write_status(
        self, tier: Mapping[str, Any], decision: Decision
    ) -> Mapping[str, Any] | None:
        """Patch the status when it changed; the tier as the API server now holds it."""
        meta = tier["metadata"]
        patch = status_patch(tier.get("status"), decision.status)
        if patch is None:
            return None
        updated: dict[str, Any] | None = await asyncio.to_thread(
            self.kube.patch_status,
            API_VERSION,
            "KVCacheTier",
            meta["name"],
            meta["namespace"],
            patch,
            meta.get("resourceVersion"),
        )
        metrics.WRITES.labels("patch", "KVCacheTier/status").inc()
        # Our own write is the freshest copy: later reconciles start from it, not from a
        # cache the watch has not caught up with yet.
        key = (meta["namespace"], meta["name"])
        if updated and key in self.cache.tiers:
            self.cache.set_tier(key, updated)
        return updated

    def _announce(
        self, obj: Mapping[str, Any], events: list[Event], written: list[DesiredWrite]
    ) -> None:
        for event in announce(events, written):
            self._event(obj, event)

    def _event(self, obj: Mapping[str, Any], event: Event) -> None:
        self.events.send(
            event_body(
                obj, event.type, event.reason, event.message, self.instance, datetime.now(UTC)
            )
        )
