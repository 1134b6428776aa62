"""Reconcile one KVCacheTier: read facts from the cache, decide, write only what changed.

The writes go through writer.Writer; a tier's removal (take-back) and its fio probe Job are
here too. The loops the reconcile runs in are runtime.py's; the KVCachePolicy has its own
reconciler (policy_reconciler.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier import metrics
from kvtier.controller.cache import TierKey
from kvtier.controller.policy_reconciler import POLICY_KEY, PolicyReconciler
from kvtier.controller.resync import RESYNC_SECONDS
from kvtier.controller.runtime import Runtime
from kvtier.kube.aio import AsyncKube
from kvtier.kube.rest import Kube
from kvtier.names import FINALIZER
from kvtier.names.objects import tier_id
from kvtier.policy.answers import ObjectKey, answers_are_ours
from kvtier.policy.claims import claim_key
from kvtier.policy.contract import DEFAULT_PROBE_IMAGE, Decision, Facts
from kvtier.policy.decide import decide
from kvtier.policy.events import Event, announce
from kvtier.policy.provisioning import object_key, pending_writes, removal_writes
from kvtier.policy.scheduler import removal_configmap_writes
from kvtier.policy.stored import status_patch
from kvtier.render import DesiredWrite
from kvtier.render.scheduler import config_ref
from kvtier.targets.registry import registered

log = logging.getLogger("kvtier.controller")
PENDING_RETRY_SECONDS = 1.0
# A target whose schema the API server does not serve yet (it has just restarted, a CRD is
# being installed) is looked at again this soon, with a fresh OpenAPI index: nothing else
# would wake it, and its writes wait for the schema (policy/atomic.py, SchemaUnknown).
SCHEMA_RETRY_SECONDS = 2.0
# A scheduler ConfigMap that answered 403 is not written again for this long, unless it
# changes: the grant (a Role kvtier cannot watch) is looked for again after it.
FORBIDDEN_RETRY_SECONDS = 300.0


class Controller(Runtime):
    """The running operator: reconciles the KVCacheTiers (and hands the KVCachePolicy to its
    own reconciler)."""

    def __init__(
        self,
        kube: Kube,
        workers: int = 4,
        probe_image: str | None = None,
        resync_seconds: float = RESYNC_SECONDS,
        aio: AsyncKube | None = None,
    ) -> None:
        super().__init__(kube, workers, resync_seconds, aio)
        self.probe_image = probe_image or DEFAULT_PROBE_IMAGE
        self.policy_reconciler = PolicyReconciler(kube, self.cache, self.writer, self.queue)
        # Scheduler ConfigMaps kvtier may not patch: (namespace, name) → (resourceVersion,
        # when the 403 came).
        self.forbidden: dict[TierKey, tuple[str | None, float]] = {}

    async def reconcile(self, key: TierKey) -> None:
        if key == POLICY_KEY:
            await self.policy_reconciler.reconcile()
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
            config_map = await self.aio.get("v1", "ConfigMap", ref["name"], namespace)
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
            unkept=self.writer.unkept,
            observation=self.observer.results.get(key),
            storage_classes=dict(self.cache.storage_classes),
            capacities=list(self.cache.capacities.values()),
            scheduler_configmaps=schedulers,
            scheduler_forbidden=self._forbidden(schedulers),
            llmisvc_configs=self._llmisvc_configs(target),
            kserve_namespace=self.cache.kserve_namespace,
            related=self.cache.related_for(target),
            target_schemas=await self._target_schemas(target),
            target_versions=await self._served_versions(tier) if target is None else None,
        )
        decision = decide(facts)
        if target is not None and any(
            w.action == "Apply" and w.writes_to(target) for w in decision.writes
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
                await self.writer.set_finalizer(tier, present=True)
            bases: dict[ObjectKey, tuple[str, str]] = {}
            written = await self._perform(tier, decision.writes, announce_done=False, bases=bases)
            # The API returned what it now holds: decide again from that, so one status
            # write reports the result instead of a second pass after the watch catches up.
            tier = self.cache.tiers.get(key, tier)  # the finalizer write moved it on
            target = self.cache.target_for(tier)
            schedulers = await self._scheduler_configmaps(key, target)
            configs = self._llmisvc_configs(target)
            ours = answers_are_ours(facts, tier, target, schedulers, configs, written, bases)
            facts = replace(
                facts,
                tier=tier,
                target=target,
                owned=self.cache.owned_for(namespace, name),
                scheduler_configmaps=schedulers,
                scheduler_forbidden=self._forbidden(schedulers),
                llmisvc_configs=configs,
                # Answers that are what was read plus kvtier's writes: only the judging
                # steps run again (policy/answers.py).
                worked=decision.worked if ours else None,
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
        if _reason(decision.status, "Applied") == "SchemaUnknown":
            self.schemas.index = None
            self.queue.add_after(key, SCHEMA_RETRY_SECONDS)
        if written and decision.writes:
            # The API's responses carried changes others made meanwhile (their own watch
            # events are then no longer news, see cache.is_news), and they need more writes:
            # another round's work, as nothing else will wake the tier for them.
            self.queue.add_after(key, PENDING_RETRY_SECONDS)

    async def _served_versions(self, tier: Mapping[str, Any]) -> tuple[str, ...] | None:
        """The apiVersions the cluster serves the target's kind in, for a tier that names a
        version and found no target: a version the cluster does not serve is its own reason
        (TargetVersionNotServed), not a missing object. None when the tier names none."""
        ref = (tier.get("spec") or {}).get("targetRef") or {}
        version = ref.get("apiVersion")
        if not isinstance(version, str) or "/" not in version:
            return None
        group = version.rpartition("/")[0]
        return await asyncio.to_thread(self.schemas.served_versions, group, str(ref.get("kind")))

    def _llmisvc_configs(
        self, target: Mapping[str, Any] | None
    ) -> dict[tuple[str, str], dict[str, Any]] | None:
        """The LLMInferenceServiceConfigs the watch holds for a target whose kind takes its
        endpoint picker's version from them (Kind.reads_picker_configs); None otherwise."""
        kind = registered(str(target.get("kind"))) if target is not None else None
        if target is None or kind is None or not kind.reads_picker_configs:
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
                configmap = await self.aio.get("v1", "ConfigMap", where[1], where[0])
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
        self,
        tier: Mapping[str, Any],
        writes: list[DesiredWrite],
        announce_done: bool = True,
        remember_unkept: bool = True,
        bases: dict[ObjectKey, tuple[str, str]] | None = None,
    ) -> list[DesiredWrite]:
        """The tier's writes through the writer (in order, stopping at the first failure).
        One Event tells what was written: here, or by the caller when `announce_done` is
        False and all went through (a failure part-way is always told here)."""
        done: list[DesiredWrite] = []
        try:
            await self.writer.perform(
                writes,
                done,
                partial(self._refused, tier),
                remember_unkept=remember_unkept,
                bases=bases,
            )
        except BaseException:
            self._announce(tier, [], done)
            raise
        if announce_done:
            self._announce(tier, [], done)
        return done

    def _refused(self, tier: Mapping[str, Any], w: DesiredWrite, exc: ApiException) -> bool:
        if exc.status != 403 or w.kind != "ConfigMap":
            return False
        self._forbid(tier, w)  # the condition says how to grant it
        return True

    async def _probe(self, tier: Mapping[str, Any], decision: Decision) -> None:
        """Start, collect and clean up the tier's fio probe Job as decided."""
        step = decision.probe
        assert step is not None
        meta = tier["metadata"]
        key = (meta["namespace"], meta["name"])
        for name in step.delete:
            await self.writer.delete("batch/v1", "Job", name, meta["namespace"])
        if step.create is not None:
            try:
                await self.writer.create(step.create)
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
            # Nothing holds a take-back back: no later decision writes the target for this
            # tier (its memo is forgotten below), so its answer is not judged either.
            await self._perform(tier, todo, remember_unkept=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
        await self.writer.set_finalizer(tier, present=False)
        self.writer.forget_unkept(target)
        for obj in owned.values():
            self.writer.forget_unkept(obj)
        if deleting:
            metrics.forget_tier(namespace, name)

    def _claim_retention(self, tier: Mapping[str, Any]) -> str:
        policy = (self.cache.policy or {}).get("spec") or {}
        return str(policy.get("storageRetention") or "Delete")

    async def _write_status(
        self, tier: Mapping[str, Any], decision: Decision
    ) -> Mapping[str, Any] | None:
        """Patch the status when it changed; the tier as the API server now holds it."""
        patch = status_patch(tier.get("status"), decision.status)
        if patch is None:
            return None
        return await self.writer.write_status("KVCacheTier", tier, patch)

    def _announce(
        self, obj: Mapping[str, Any], events: list[Event], written: list[DesiredWrite]
    ) -> None:
        for event in announce(events, written):
            self._event(obj, event)


def _reason(status: Mapping[str, Any], condition: str) -> str | None:
    """The reason of one condition in a status as decided."""
    found = (c for c in status.get("conditions") or [] if c.get("type") == condition)
    return next((str(c.get("reason")) for c in found), None)
