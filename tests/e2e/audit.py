"""Count the operator's API writes from the kube-apiserver audit log."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from localcluster import AUDIT_CONTROL, audited

OPERATOR_USER = "system:serviceaccount:kvtier-system:kvtier-operator"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def writes(
    audit_log: Path,
    user: str = OPERATOR_USER,
    since: float = 0.0,
    exclude: tuple[str, ...] = ("leases",),
    names: list[str] | None = None,
    namespace: str | None = None,
) -> Counter[tuple[str, str]]:
    """(verb, resource[/subresource]) → count, for completed requests after `since` (epoch s).

    Leader-election Lease renewals are left out by default: they are the cost of HA, paid
    every few seconds whatever the tiers do, and counted separately where it matters. With
    `namespace`, only writes of objects in that namespace."""
    counts: Counter[tuple[str, str]] = Counter()
    # No log, or one without the cluster's control write: the cluster audits nothing, and a
    # count of 0 would prove nothing.
    if not audited(audit_log, "create", "configmaps", AUDIT_CONTROL):
        raise AssertionError(
            f"{audit_log} does not record the cluster's control write (ConfigMap "
            f"default/{AUDIT_CONTROL}): the API server audits no writes here"
        )
    for line in audit_log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("stage") != "ResponseComplete" or entry.get("verb") not in WRITE_VERBS:
            continue
        if entry.get("user", {}).get("username") != user:
            continue
        if _epoch(entry.get("stageTimestamp", "")) < since:
            continue
        ref = entry.get("objectRef", {})
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        resource = ref.get("resource", "")
        if resource in exclude:
            continue
        if names is not None:
            names.append(
                f"{entry['verb']} {resource}/{ref.get('name', '')} {entry['stageTimestamp']}"
            )
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        counts[(entry["verb"], resource)] += 1
    return counts


def _epoch(stamp: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
