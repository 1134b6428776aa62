"""Every write the operator sends: one path for apply, guarded patch and delete.

The tier and the policy reconcilers both hand their writes to `Writer.perform`: in order,
stopping at the first failure, each counted in metrics.WRITES, each answer taken into the
cache (fresher than the watch). A write the API server did not keep (its schema pruned the
fields) is remembered by object, so the next decision holds it back until the object changes
(policy/provisioning.py). Events and conditions are the callers'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier import metrics
from kvtier.controller.cache import Cache
from kvtier.kube.aio import AsyncKube
from kvtier.kube.wire import without_managed_fields
from kvtier.names import API_VERSION, FINALIZER
from kvtier.policy.answers import ObjectKey
from kvtier.policy.provisioning import Unkept, UnkeptKey, unkept_write
from kvtier.render import DesiredWrite

log = logging.getLogger("kvtier.controller")

# A write the API server refused that the caller takes care of: True lets the sequence go on
# without it (it is not done), False lets the error stop the sequence.
Refused = Callable[[DesiredWrite, ApiException], bool]


class Writer:
    """Sends writes from the event loop; owns the memo of writes the server did not keep."""

    def __init__(self, kube: AsyncKube, cache: Cache) -> None:
        self.kube = kube
        self.cache = cache
        # Writes the API server did not keep, by object: held back until it changes.
        self.unkept: dict[UnkeptKey, Unkept] = {}

    async def perform(
        self,
        writes: Iterable[DesiredWrite],
        done: list[DesiredWrite],
        refused: Refused | None = None,
        remember_unkept: bool = True,
        bases: dict[ObjectKey, tuple[str, str]] | None = None,
    ) -> list[DesiredWrite]:
        """Apply, patch or delete in order; stop at the first failure (the retry starts over,
        and the target patch comes last, so a model server never points at missing storage).
        `done` receives each write the server took, also when a later one fails; it is
        returned. `remember_unkept`: note the writes the server did not keep (the tier's
        decisions hold them back; the policy's do not read the memo). `bases` receives, for
        each guarded apply, the resourceVersion it was sent against and the one it answered."""
        generations: dict[tuple[str, str | None, str], Any] = {}
        try:
            for w in writes:
                if w.action == "Delete":
                    await self.delete(w.api_version, w.kind, w.name, w.namespace)
                    self.cache.forget_written(w.kind, w.namespace, w.name)
                    done.append(w)
                    continue
                try:
                    written = await self.send(w, bases)
                except ApiException as exc:
                    if refused is not None and refused(w, exc):
                        continue
                    raise
                if remember_unkept:
                    self._note_kept(w, written)
                if written:
                    self.cache.remember_written(written)
                    generations[(w.kind, w.namespace, w.name)] = (
                        written.get("metadata") or {}
                    ).get("generation")
                done.append(w)
        finally:
            # kvtier's own later writes to an object do not count as a change to it.
            for held, unkept in list(self.unkept.items()):
                if held[:3] in generations:
                    self.unkept[held] = replace(unkept, generation=generations[held[:3]])
        return done

    def _note_kept(self, w: DesiredWrite, written: Any) -> None:
        key = (w.kind, w.namespace, w.name, w.action)
        unkept = unkept_write(w, written)
        if unkept is None:
            self.unkept.pop(key, None)
            return
        self.unkept[key] = unkept
        log.warning(
            "%s %s: the API server did not keep %s; holding this write back",
            w.kind,
            w.name,
            ", ".join(unkept.paths),
        )

    async def send(
        self, w: DesiredWrite, bases: dict[ObjectKey, tuple[str, str]] | None = None
    ) -> Any:
        """One Apply or Patch. A guarded write whose guard failed (the object changed since
        it was read: 409 from an apply or a patch, 422 from a `test` op) refreshes the cached
        object before the error goes up, so the retry renders from what the server holds."""
        try:
            if w.action == "Apply":
                if w.guard is None:
                    read = self._cached_meta(w).get("resourceVersion")
                    answer = await self.apply(w.body, w.kind)
                    self._applied(w, read, answer, bases)
                    return answer
                return await self._guarded_apply(w, w.guard, bases)
            try:
                ops = w.body["jsonPatch"]
                return await self.kube.json_patch(w.api_version, w.kind, w.name, w.namespace, ops)
            finally:
                metrics.WRITES.labels("patch", w.kind).inc()
        except ApiException as exc:
            guarded = w.action == "Patch" or w.guard is not None
            if guarded and exc.status in (409, 422):
                fresh = await self.kube.get(w.api_version, w.kind, w.name, w.namespace)
                if fresh:
                    self.cache.remember_written(fresh)
            raise

    async def _guarded_apply(
        self,
        w: DesiredWrite,
        generation: int,
        bases: dict[ObjectKey, tuple[str, str]] | None = None,
    ) -> Any:
        """An apply that carries atomic lists whole, rendered from the object at `generation`:
        sent only while the object's spec is still that one, with a resourceVersion of that
        generation as its precondition: first the cached object's, then (after a 409) one just
        read. Status writes of the object's own controller (KServe's, a Deployment's) move the
        resourceVersion, not the generation, so they never refuse a write for good; a change
        of the spec does: a 409 goes up, after the fresh object is cached for the re-render."""
        meta = self._cached_meta(w)
        for _ in range(3):  # a status write between the read and the apply: read again
            if meta.get("generation") == generation and meta.get("resourceVersion"):
                guarded = {**w.body["metadata"], "resourceVersion": meta["resourceVersion"]}
                try:
                    answer = await self.apply({**w.body, "metadata": guarded}, w.kind)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                else:
                    self._applied(w, meta["resourceVersion"], answer, bases)
                    return answer
            fresh = await self.kube.get(w.api_version, w.kind, w.name, w.namespace)
            meta = (fresh or {}).get("metadata") or {}
            if meta.get("generation") != generation:
                if fresh:
                    self.cache.remember_written(fresh)
                raise ApiException(
                    status=409,
                    reason=f"{w.kind} {w.name} changed since it was read (generation "
                    f"{meta.get('generation')}, rendered from {generation})",
                )
        raise ApiException(status=409, reason=f"{w.kind} {w.name} kept changing")

    def _applied(
        self,
        w: DesiredWrite,
        read: Any,
        answer: Any,
        bases: dict[ObjectKey, tuple[str, str]] | None,
    ) -> None:
        """An apply to a cached target went through: which resourceVersion it was sent
        against (the cache's then; a guarded apply's precondition) and which it answered."""
        key = (w.kind, w.namespace or "", w.name)
        if key not in self.cache.targets:  # not a target (a PV, the evictor)
            return
        answered = ((answer or {}).get("metadata") or {}).get("resourceVersion")
        self.cache.note_applied(key, read, answered)
        if bases is not None and read is not None and answered is not None:
            bases[(w.kind, w.namespace, w.name)] = (str(read), str(answered))

    def _cached_meta(self, w: DesiredWrite) -> Mapping[str, Any]:
        """The metadata of the cached view of the write's object in its apiVersion ({} when
        none is cached)."""
        views = self.cache.targets.get((w.kind, w.namespace or "", w.name)) or {}
        view = views.get(w.api_version) or {}
        meta: Mapping[str, Any] = view.get("metadata") or {}
        return meta

    async def apply(self, body: Mapping[str, Any], kind: str | None = None) -> Any:
        """Server-side apply; counted (by `kind`, else the body's) once the server took it."""
        written = await self.kube.apply(body)
        metrics.WRITES.labels("apply", kind or str(body.get("kind"))).inc()
        return written

    async def create(self, body: Mapping[str, Any]) -> Any:
        created = await self.kube.create(body)
        metrics.WRITES.labels("create", str(body.get("kind"))).inc()
        return created

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> None:
        await self.kube.delete(api_version, kind, name, namespace)
        metrics.WRITES.labels("delete", kind).inc()

    async def set_finalizer(self, tier: Mapping[str, Any], present: bool) -> None:
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
            updated = await self.kube.apply(body)
        except ApiException as exc:
            if exc.status != 404 or present:
                raise
            updated = None
        metrics.WRITES.labels("apply", "KVCacheTier").inc()
        key = (meta["namespace"], meta["name"])
        if updated and key in self.cache.tiers:
            self.cache.set_tier(key, updated)  # fresher than the watch, as after status writes

    async def write_status(
        self, kind: str, obj: Mapping[str, Any], patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch the status of a KVCacheTier or the KVCachePolicy, guarded by the
        resourceVersion it was decided from; the object as the API server now holds it."""
        meta = obj["metadata"]
        updated: dict[str, Any] | None = await self.kube.patch_status(
            API_VERSION,
            kind,
            meta["name"],
            meta.get("namespace"),
            patch,
            meta.get("resourceVersion"),
        )
        metrics.WRITES.labels("patch", f"{kind}/status").inc()
        # Our own write is the freshest copy: later reconciles start from it, not from a
        # cache the watch has not caught up with yet.
        if updated and kind == "KVCachePolicy":
            self.cache.policy = without_managed_fields(updated)
        elif updated:
            key = (meta["namespace"], meta["name"])
            if key in self.cache.tiers:
                self.cache.set_tier(key, updated)
        return updated

    def release_unkept(self, groups: set[str]) -> None:
        """Held writes of these API groups get another try (their schema changed)."""
        for key, unkept in list(self.unkept.items()):
            if unkept.group in groups:
                del self.unkept[key]

    def forget_unkept(self, obj: Mapping[str, Any] | None) -> None:
        """Drop the memo of writes to an object kvtier no longer writes (its tier is gone)."""
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        where = (obj.get("kind"), meta.get("namespace"), meta.get("name"))
        for key in [k for k in self.unkept if k[:3] == where]:
            del self.unkept[key]
