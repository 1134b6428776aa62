"""The shape the API server stores a tier's status in, and the merge patch that gets it there.

A JSON merge patch (RFC 7386) merges maps key by key: a key left out of a nested map is kept,
not removed. So the patch from the stored status to the decided one names each key that goes
with null, at whatever depth (a tier whose router config went keeps no `plan.scheduler`), and
replaces lists whole, as merge patch does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    if isinstance(value, (str, int, float)):  # most values: before a Mapping's slower check
        return value
    if isinstance(value, (dict, Mapping)):
        return {k: prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune(v) for v in value]
    return value


def merge_diff(current: Any, desired: Any) -> Any:
    """The merge patch that turns `current` into `desired` (both as stored: no None values);
    maps are patched key by key, anything else is replaced."""
    if not isinstance(current, (dict, Mapping)) or not isinstance(desired, (dict, Mapping)):
        return desired
    patch: dict[str, Any] = {k: None for k in current if k not in desired}
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
        elif current[key] != value:
            patch[key] = merge_diff(current[key], value)
    return patch


def status_patch(
    current: Mapping[str, Any] | None, desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The merge patch that turns the stored status `current` into `desired`, or None when
    they already agree (kvtier writes no status that would not change)."""
    now = {k: v for k, v in (current or {}).items() if k in STATUS_KEYS and v is not None}
    want = {k: v for k in STATUS_KEYS if (v := prune(desired.get(k))) is not None}
    patch = merge_diff(now, want)
    return patch or None
