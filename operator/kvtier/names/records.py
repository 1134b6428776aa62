"""The annotations in which kvtier records what it changed on objects it does not own, so a
take-back can put the user's values back (and any layer can tell kvtier's writes apart)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# kvtier's record on a target: what it applied and the user's values it overwrote (JSON).
APPLIED_ANNOTATION = "kvcache.io/applied"
# kvtier's record on a router ConfigMap: the tier's id, the key and the user's values (JSON).
SCHEDULER_RECORD = "kvcache.io/scheduler"


def configmap_record(configmap: Mapping[str, Any]) -> dict[str, Any] | None:
    """kvtier's record on a ConfigMap, or None (absent or garbled)."""
    meta = configmap.get("metadata")
    annotations = (meta.get("annotations") if isinstance(meta, Mapping) else None) or {}
    text = annotations.get(SCHEDULER_RECORD)
    try:
        record = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
