"""Notice when the schema of a kind kvtier writes changes (a CRD upgraded or replaced).

A write the API server did not keep (its CRD pruned or rejected the fields) is held back until
the object changes (policy/provisioning.py). A new CRD version changes nothing on the object,
so the held write would wait for a restart. The API server's OpenAPI v3 discovery document
(`GET /openapi/v3`, readable by every authenticated client through system:discovery, no
RBAC of kvtier's own) names each group version with a hash of its schema; a changed hash is
a changed schema. kvtier reads no CustomResourceDefinition objects.

The same index leads to each group version's document, which says how every field of a kind
merges (render/served_schema.py): whether an apply would replace a part whole is read from
it, never guessed. Documents are kept by their URL, which carries the hash: a changed schema
is a new URL, read once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kvtier.render.served_schema import document_kinds, kind_schema
from kvtier.targets.registry import KINDS

log = logging.getLogger(__name__)

# The API groups whose objects kvtier writes and whose schemas a CRD may define: the target
# kinds' (their registry) and Rook's, for the replica-1 CephFilesystem.
WATCHED_GROUPS = frozenset({*(k.group for k in KINDS), "ceph.rook.io"})
INTERVAL_SECONDS = 30.0
_UNREAD: Any = object()


def schema_hashes(index: Mapping[str, Any], groups: Iterable[str]) -> dict[str, str]:
    """{group/version: schema hash} for the watched groups, from the /openapi/v3 index."""
    wanted = set(groups)
    out: dict[str, str] = {}
    paths = index.get("paths")
    for path, entry in (paths if isinstance(paths, Mapping) else {}).items():
        parts = str(path).split("/")
        if len(parts) != 3 or parts[0] != "apis" or parts[1] not in wanted:
            continue
        url = entry.get("serverRelativeURL") if isinstance(entry, Mapping) else None
        digest = parse_qs(urlsplit(str(url or "")).query).get("hash", [""])[0]
        out[f"{parts[1]}/{parts[2]}"] = digest
    return out


def document_url(index: Mapping[str, Any], api_version: str) -> str | None:
    """The server-relative URL (with its hash) of a group version's OpenAPI v3 document."""
    paths = index.get("paths")
    entry = (paths if isinstance(paths, Mapping) else {}).get(f"apis/{api_version}")
    url = entry.get("serverRelativeURL") if isinstance(entry, Mapping) else None
    return str(url) if url else None


def changed_groups(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    """Groups with a group version added, removed or re-hashed."""
    return {gv.split("/", 1)[0] for gv in set(before) ^ set(after)} | {
        gv.split("/", 1)[0] for gv in set(before) & set(after) if before[gv] != after[gv]
    }


class SchemaWatch:
    """Polls the OpenAPI v3 index; calls `on_change(groups)` when a watched schema changes.

    The first read only records the hashes. A failed read is logged and retried at the next
    tick: it never stops the operator."""

    def __init__(
        self,
        read_index: Callable[[], Mapping[str, Any]],
        on_change: Callable[[set[str]], None],
        groups: Iterable[str] = WATCHED_GROUPS,
        interval: float = INTERVAL_SECONDS,
        read_document: Callable[[str], Mapping[str, Any]] | None = None,
        read_index_now: Callable[[], Awaitable[Mapping[str, Any]]] | None = None,
    ) -> None:
        self.read_index = read_index
        # The read before an apply, from the event loop (the ticks read from a thread).
        self.read_index_now = read_index_now
        self.read_document = read_document
        self.on_change = on_change
        self.groups = frozenset(groups)
        self.interval = interval
        self.hashes: dict[str, str] | None = None
        self.index: Mapping[str, Any] | None = None
        # (document URL, kind) → that kind's schema (None: the document has no such kind).
        self.schemas: dict[tuple[str, str], dict[str, Any] | None] = {}
        # One document read at a time: workers that ask together for a schema not read yet
        # wait for the first one's read instead of each decoding the same megabytes.
        self._reading = threading.Lock()
        # document URL → the kinds it defines, so a kind it lacks is known without reading it
        # again (an InferenceService tier asks every version of KServe's group).
        self.kinds_in: dict[str, frozenset[str]] = {}
        # Fresh reads of the index, one at a time: how many began, and which one `index` is.
        self._index_lock = asyncio.Lock()
        self._index_reads = 0
        self._index_from = 0

    async def fresh_schemas_of(self, api_version: str, kind: str) -> dict[str, dict[str, Any]]:
        """`schemas_of` from an index read after this call began (a CRD replaced a moment ago
        is seen), read from the event loop. Workers asking together share one read: a read
        that began after a worker asked is as fresh as one of its own."""
        asked = self._index_reads
        try:
            async with self._index_lock:
                if self._index_from <= asked:
                    self._index_reads += 1
                    started = self._index_reads
                    self.index = await self._read_index_now()
                    self._index_from = started
        except Exception as exc:  # discovery is advisory: never a crash
            log.warning("reading /openapi/v3 failed: %s", exc)
            self.index = None  # the next caller reads it again
            return {}
        known = self.cached_schemas_of(api_version, kind)
        if known is not None:
            return known
        return await asyncio.to_thread(self.schemas_of, api_version, kind)

    async def _read_index_now(self) -> Mapping[str, Any]:
        if self.read_index_now is not None:
            return await self.read_index_now()
        return await asyncio.to_thread(self.read_index)

    def schema_of(self, api_version: str, kind: str) -> dict[str, Any] | None:
        """The schema the API server serves for `kind` at `api_version`; None when it serves
        none or it cannot be read now (the caller then writes nothing it would need it for).
        Reads the index first if no tick has yet."""
        if self.read_document is None:
            return None
        try:
            if self.index is None:
                self.index = self.read_index()
            url = document_url(self.index, api_version)
            if url is None:
                return None
            key = (url, kind)
            if key in self.schemas:
                return self.schemas[key]
            if url in self.kinds_in and kind not in self.kinds_in[url]:
                return None
            with self._reading:
                if key in self.schemas:  # read meanwhile by the worker this one waited for
                    return self.schemas[key]
                document = self.read_document(url)
                found = kind_schema(document, api_version, kind)
                # Only the current document of each group version is kept: the kinds read
                # from an older one (another hash) go, those of this one stay.
                base = url.split("?", 1)[0]
                stale = [k for k in self.schemas if k[0] != url and k[0].split("?", 1)[0] == base]
                for old in stale:
                    del self.schemas[old]
                for old_url in [u for u in self.kinds_in if u != url and u.split("?")[0] == base]:
                    del self.kinds_in[old_url]
                self.kinds_in[url] = document_kinds(document)
                self.schemas[key] = found
            return self.schemas[key]
        except Exception as exc:  # discovery is advisory: never a crash
            log.warning("reading the schema of %s %s failed: %s", api_version, kind, exc)
            return None

    def schemas_of(self, api_version: str, kind: str) -> dict[str, dict[str, Any]]:
        """The served schemas of `kind` in every version its group serves, by apiVersion
        (an object is read in one version and may be written in another); a version whose
        document could not be read, or that has no such kind, is left out."""
        group = api_version.rpartition("/")[0]
        if self.index is None:
            try:
                self.index = self.read_index()
            except Exception as exc:  # discovery is advisory: never a crash
                log.warning("reading /openapi/v3 failed: %s", exc)
                return {}
        paths = self.index.get("paths")
        prefix = f"apis/{group}/"
        versions = [p[len("apis/") :] for p in (paths or {}) if str(p).startswith(prefix)]
        found = {v: self.schema_of(v, kind) for v in sorted(versions)}
        return {v: s for v, s in found.items() if s is not None}

    def cached_schemas_of(self, api_version: str, kind: str) -> dict[str, dict[str, Any]] | None:
        """What `schemas_of` answers when that needs no read (the index and every document it
        would look at are in hand), else None: a reconcile then asks without leaving the
        event loop. Safe beside a thread that reads (it only looks up)."""
        index = self.index
        if index is None or self.read_document is None:
            return None
        group = api_version.rpartition("/")[0]
        prefix = f"apis/{group}/"
        found: dict[str, dict[str, Any]] = {}
        for path in sorted(str(p) for p in index.get("paths") or {} if str(p).startswith(prefix)):
            version = path[len("apis/") :]
            url = document_url(index, version)
            if url is None:
                continue
            schema = self.schemas.get((url, kind), _UNREAD)
            if schema is _UNREAD:
                kinds = self.kinds_in.get(url)
                if kinds is None or kind in kinds:
                    return None  # a document to read
            elif schema is not None:
                found[version] = schema
        return found

    def served_versions(self, group: str, kind: str) -> tuple[str, ...] | None:
        """The apiVersions of `group` the API server serves `kind` in (their OpenAPI v3
        documents define it), sorted; None when the index or one of the group's documents
        cannot be read now (nothing is then said about what the cluster serves)."""
        if self.index is None:
            try:
                self.index = self.read_index()
            except Exception as exc:  # discovery is advisory: never a crash
                log.warning("reading /openapi/v3 failed: %s", exc)
                return None
        served = self.schemas_of(f"{group}/", kind)
        paths = self.index.get("paths") if self.index is not None else None
        for path in paths if isinstance(paths, Mapping) else {}:
            url = document_url(self.index or {}, str(path)[len("apis/") :])
            if str(path).startswith(f"apis/{group}/") and url and (url, kind) not in self.schemas:
                return None  # a document that could not be read: not known, not "not served"
        return tuple(sorted(served))

    def check(self) -> set[str]:
        """One read; the groups whose schema changed since the last one."""
        self.index = self.read_index()
        now = schema_hashes(self.index, self.groups)
        before, self.hashes = self.hashes, now
        if before is None:
            return set()
        changed = changed_groups(before, now)
        if changed:
            log.info("schema of %s changed: held writes are tried again", ", ".join(changed))
            self.on_change(changed)
        return changed

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.check)
            except Exception as exc:  # discovery is advisory: never a crash
                log.warning("reading /openapi/v3 failed: %s", exc)
            await asyncio.sleep(self.interval)
