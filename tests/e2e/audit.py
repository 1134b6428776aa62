"""Count the operator's API writes from the kube-apiserver audit log."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from localcluster import AUDIT_CONTROL, audited
from tests.e2e.operator_process import OperatorProcess

OPERATOR_USER = "system:serviceaccount:kvtier-system:kvtier-operator"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def entries(
    audit_log: Path,
    user: str = OPERATOR_USER,
    since: float = 0.0,
    exclude: tuple[str, ...] = ("leases",),
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """The completed write requests of `user` after `since` (epoch s), as logged.

    Leader-election Lease renewals are left out by default: they are the cost of HA, paid
    every few seconds whatever the tiers do, and counted separately where it matters. With
    `namespace`, only writes of objects in that namespace.

    Two positive controls make an empty answer mean something: the log records the
    cluster's own control write (else the cluster audits nothing), and it records at least
    one write of `user` at all, at any time (else the name does not match anyone who acts
    here, and every count of it is 0)."""
    # No log, or one without the cluster's control write: the cluster audits nothing, and a
    # count of 0 would prove nothing.
    if not audited(audit_log, "create", "configmaps", AUDIT_CONTROL):
        raise AssertionError(
            f"{audit_log} does not record the cluster's control write (ConfigMap "
            f"default/{AUDIT_CONTROL}): the API server audits no writes here"
        )
    found, anything = [], False
    for line in audit_log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("stage") != "ResponseComplete" or entry.get("verb") not in WRITE_VERBS:
            continue
        if entry.get("user", {}).get("username") != user:
            continue
        anything = True
        if _epoch(entry.get("stageTimestamp", "")) < since:
            continue
        ref = entry.get("objectRef", {})
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        if ref.get("resource", "") in exclude:
            continue
        found.append(entry)
    if not anything:
        raise AssertionError(
            f"{audit_log} records no write by {user} at all: a count of its writes proves "
            "nothing (is that the identity that acts here?)"
        )
    return found


def writes(
    audit_log: Path,
    user: str = OPERATOR_USER,
    since: float = 0.0,
    exclude: tuple[str, ...] = ("leases",),
    names: list[str] | None = None,
    namespace: str | None = None,
) -> Counter[tuple[str, str]]:
    """(verb, resource[/subresource]) → count of `entries` (same filters); each one's
    "verb resource/name time" is appended to `names` when given."""
    counts: Counter[tuple[str, str]] = Counter()
    for entry in entries(audit_log, user, since, exclude, namespace):
        ref = entry.get("objectRef", {})
        resource = ref.get("resource", "")
        if names is not None:
            names.append(
                f"{entry['verb']} {resource}/{ref.get('name', '')} {entry['stageTimestamp']}"
            )
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        counts[(entry["verb"], resource)] += 1
    return counts


# How long the operator must have written nothing before an idle window starts: it sends a
# reconcile's Events after the status they describe (operator/kvtier/controller/events.py), so
# a condition seen in the status does not mean its Event is written yet.
SETTLE_SECONDS = 2.0


def wait_quiet(
    audit_log: Path, seconds: float, timeout: float = 120, namespace: str | None = None
) -> None:
    """Return once the operator has written nothing (in `namespace`, when given) for
    `seconds`: its in-flight reconciles done and their Events sent (on a shared cluster,
    other modules' tiers too, after a policy change). The log is read on from where the
    last look ended."""
    deadline = time.monotonic() + timeout
    last, offset = 0.0, 0
    while True:
        stamps, offset = _write_times(audit_log, offset, namespace)
        last = max([last, *stamps])
        if time.time() - last >= seconds:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the operator kept writing for {timeout:.0f}s")
        time.sleep(0.25)


def _write_times(audit_log: Path, offset: int, namespace: str | None) -> tuple[list[float], int]:
    """The times of the operator's writes (Leases left out, as `entries` does) in the log's
    complete lines from byte `offset` on, and the offset after them."""
    with audit_log.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    chunk = chunk[: chunk.rfind(b"\n") + 1]  # a line being written is read next time
    stamps = []
    for line in chunk.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        ref = entry.get("objectRef", {})
        if (
            entry.get("stage") == "ResponseComplete"
            and entry.get("verb") in WRITE_VERBS
            and entry.get("user", {}).get("username") == OPERATOR_USER
            and ref.get("resource") != "leases"
            and (namespace is None or ref.get("namespace") == namespace)
        ):
            stamps.append(_epoch(entry.get("stageTimestamp", "")))
    return stamps, offset + len(chunk)


def idle_writes(
    audit_log: Path,
    operator: OperatorProcess,
    passes: int = 2,
    names: list[str] | None = None,
    namespace: str | None = None,
) -> Counter[tuple[str, str]]:
    """The operator's writes over an idle window that spans `passes` of its periodic
    resyncs (OperatorProcess.wait_resyncs), so a write only the periodic pass makes is in
    it. It starts once the operator has written nothing in the window's scope for
    SETTLE_SECONDS; the caller has let the tiers settle."""
    wait_quiet(audit_log, SETTLE_SECONDS, namespace=namespace)
    start = time.time()
    operator.wait_resyncs(passes)
    return writes(audit_log, since=start, names=names, namespace=namespace)


def describe(entry: dict[str, Any]) -> str:
    """One audit entry as `verb resource[/subresource] namespace/name`, for a message."""
    ref = entry.get("objectRef") or {}
    resource = ref.get("resource", "") + (
        f"/{ref['subresource']}" if ref.get("subresource") else ""
    )
    where = "/".join(p for p in (ref.get("namespace"), ref.get("name")) if p)
    return f"{entry.get('verb')} {resource} {where}"


def _epoch(stamp: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
