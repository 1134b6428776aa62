"""The core/v1 Event kvtier records about a KVCacheTier."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kvtier.api.common import timestamp
from kvtier.names import API_VERSION, FIELD_MANAGER

MAX_MESSAGE = 1024  # the API server refuses longer Event messages


def event_body(
    tier: Mapping[str, Any], type_: str, reason: str, message: str, instance: str, now: datetime
) -> dict[str, Any]:
    """A new Event about `tier` (its resourceVersion as the one the Event speaks of)."""
    meta = tier["metadata"]
    when = timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": "KVCacheTier",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": FIELD_MANAGER},
        "reportingComponent": FIELD_MANAGER,
        "reportingInstance": instance,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }
