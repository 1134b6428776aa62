"""Notice when the schema of a kind kvtier writes changes (a CRD upgraded or replaced).

A write the API server did not keep (its CRD pruned or rejected the fields) is held back until
the object changes (policy/provisioning.py). A new CRD version changes nothing on the object,
so the held write would wait for a restart. The API server's OpenAPI v3 discovery document
(`GET /openapi/v3`, readable by every authenticated client through system:discovery, no
RBAC of kvtier's own) names each group version with a hash of its schema; a changed hash is
a changed schema. kvtier reads no CustomResourceDefinition objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

# The API groups whose objects kvtier writes and whose schemas a CRD defines.
WATCHED_GROUPS = frozenset({"serving.kserve.io", "ceph.rook.io"})
INTERVAL_SECONDS = 30.0


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
    ) -> None:
        self.read_index = read_index
        self.on_change = on_change
        self.groups = frozenset(groups)
        self.interval = interval
        self.hashes: dict[str, str] | None = None

    def check(self) -> set[str]:
        """One read; the groups whose schema changed since the last one."""
        now = schema_hashes(self.read_index(), self.groups)
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
