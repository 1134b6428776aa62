"""List, then watch, one kind, and hand every change to the event loop (client-go's informer).

Each informer reads and decodes its stream in a thread of its own and delivers the decoded
events, in order and in batches, to a callback on the event loop. A LIST after a gap (start,
an expired resourceVersion, a lost connection) also delivers DELETED for every object the
last view held that the LIST no longer has, so no deletion is missed while disconnected.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier.kube.rest import Kube, resource
from kvtier.kube.wire import decode, without_managed_fields

log = logging.getLogger("kvtier.informer")

ObjectKey = tuple[str, str]  # (namespace, name)
Deliver = Callable[[str, dict[str, Any]], None]  # (ADDED | MODIFIED | DELETED, object)
# Seconds between attempts while the API server does not answer (kopf's own schedule).
BACKOFFS: tuple[float, ...] = (1, 2, 5, 10, 20, 30)


@dataclass(frozen=True)
class Watched:
    """What an informer watches: one kind in one version, cluster-wide."""

    api_version: str
    kind: str
    label_selector: str | None = None
    # Whether tiers wait for its first LIST before anything is decided (cache sync).
    decides: bool = True
    # Whether delivered objects keep metadata.managedFields (only the targets' are read: which
    # parts are the user's); the others are delivered without them.
    managed_fields: bool = True
    # The spec fields a DELETED found by a later LIST carries: what its handler reads of an
    # object gone while disconnected (a tier's targetRef, say). The informer's view of each
    # object keeps only these, not a second copy of every spec beside the cache's.
    spec_when_gone: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return resource(self.api_version, self.kind).path()


class Gone(Exception):
    """The resourceVersion to watch from is too old: LIST again."""


def _last_known(obj: dict[str, Any], spec_fields: tuple[str, ...]) -> dict[str, Any]:
    """What a DELETED found by a later LIST carries: identity, labels and the spec fields its
    handler reads, not data (a cluster's ConfigMaps may hold megabytes the operator never
    reads; at 1,000 tiers the targets' specs alone were about 3 MiB)."""
    meta = obj.get("metadata") or {}
    kept = ("name", "namespace", "uid", "labels", "resourceVersion")
    spec = obj.get("spec")
    fields = {k: spec[k] for k in spec_fields if k in spec} if isinstance(spec, dict) else {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in kept if k in meta},
        **({"spec": fields} if fields else {}),
    }


def _key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    def __init__(
        self,
        kube: Kube,
        watched: Watched,
        deliver: Deliver,
        loop: asyncio.AbstractEventLoop,
        *,
        server_timeout: int = 600,
        backoffs: tuple[float, ...] = BACKOFFS,
        absent_retry: float = 30.0,
    ) -> None:
        self.kube = kube
        self.watched = watched
        self.deliver = deliver
        self.loop = loop
        self.server_timeout = server_timeout
        self.backoffs = backoffs
        self.absent_retry = absent_retry
        # Set once the first LIST is delivered (or the kind is not served): the cache holds
        # everything that existed, so decisions no longer start from a half-filled view.
        self.synced = threading.Event()
        self._known: dict[ObjectKey, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{watched.kind}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._list(fresh=self.synced.is_set())
                if version is None:  # not served (yet): a CRD may be installed later
                    self._stop.wait(self.absent_retry)
                    continue
                failures = 0
                self._watch(version)
            except Gone:
                continue
            except Exception as exc:  # the API server may be restarting: LIST again later
                delay = self.backoffs[min(failures, len(self.backoffs) - 1)]
                failures += 1
                log.warning(
                    "watching %s failed (%s); again in %.0fs", self.watched.kind, exc, delay
                )
                self._stop.wait(delay)

    def _list(self, fresh: bool) -> str | None:
        """LIST into the view; the resourceVersion to watch from, None when not served."""
        query = (
            {"labelSelector": self.watched.label_selector} if self.watched.label_selector else {}
        )
        if not fresh:
            # The first LIST, as client-go's: from the API server's watch cache, without
            # waiting for it to prove itself current (about 1 s for a kind nobody writes); the
            # watch from its version brings anything newer. A LIST after a gap reads fresh.
            query["resourceVersion"] = "0"
        started = time.monotonic()
        try:
            out = self.kube.request("GET", self.watched.path, query=query)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if not self.synced.is_set():
                log.info("%s: %s is not served", self.watched.kind, self.watched.api_version)
            self._replace([])
            return None
        items = out.get("items") or []
        if not self.synced.is_set():
            log.info(
                "%s: %d listed in %.2fs", self.watched.kind, len(items), time.monotonic() - started
            )
        self._replace(items)
        return str(out["metadata"]["resourceVersion"])

    def _replace(self, items: list[dict[str, Any]]) -> None:
        events = [("ADDED", self._typed(obj)) for obj in items]
        listed = {_key(obj) for _, obj in events}
        events += [("DELETED", obj) for key, obj in self._known.items() if key not in listed]
        gone = self.watched.spec_when_gone
        self._known = {_key(o): _last_known(o, gone) for kind, o in events if kind == "ADDED"}
        self._send(events)
        self.synced.set()

    def _typed(self, obj: dict[str, Any]) -> dict[str, Any]:
        # LIST items of built-in kinds carry no apiVersion/kind; handlers key on them.
        obj.setdefault("apiVersion", self.watched.api_version)
        obj.setdefault("kind", self.watched.kind)
        return obj if self.watched.managed_fields else without_managed_fields(obj)

    def _watch(self, version: str) -> None:
        """Stream from `version` until told to stop; re-watch from the last version seen when
        the server ends the stream. Raises Gone when the version expired."""
        while not self._stop.is_set():
            query = {
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(self.server_timeout),
            }
            if self.watched.label_selector:
                query["labelSelector"] = self.watched.label_selector
            try:
                for lines in self.kube.stream(self.watched.path, query, self.server_timeout + 60):
                    events: list[tuple[str, dict[str, Any]]] = []
                    for line in lines:
                        version = self._apply(decode(line), events, version)
                    self._send(events)
                    if self._stop.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:
                    raise Gone from exc
                raise

    def _apply(
        self, event: dict[str, Any], events: list[tuple[str, dict[str, Any]]], version: str
    ) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                self._send(events)
                raise Gone
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        seen = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind == "BOOKMARK":
            return seen
        obj = self._typed(obj)
        if kind == "DELETED":
            self._known.pop(_key(obj), None)
        else:
            self._known[_key(obj)] = _last_known(obj, self.watched.spec_when_gone)
        events.append((str(kind), obj))
        return seen

    def _send(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        if self.loop.is_closed():  # the operator is shutting down
            self._stop.set()
        elif events:
            self.loop.call_soon_threadsafe(self._dispatch, events)

    def _dispatch(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        for kind, obj in events:
            try:
                self.deliver(kind, obj)
            except Exception:  # one bad object never stops the stream
                log.exception("handling %s %s %s/%s", kind, self.watched.kind, *_key(obj))
