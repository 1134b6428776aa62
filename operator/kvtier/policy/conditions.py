"""metav1.Condition bookkeeping: lastTransitionTime moves only when a status flips.

Conditions are plain dicts in the API's camelCase shape, so the operator can compare the
status it wants with the status it read and skip writes that would change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kvtier.api.common import timestamp

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
MAX_MESSAGE = 32768
# Conditions whose True means trouble.
NEGATIVE_POLARITY = frozenset({"Conflict", "DiskPressure"})


@dataclass(frozen=True)
class Verdict:
    """One condition as a decision: what, whether, why."""

    type: str
    status: str
    reason: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status == (FALSE if self.type in NEGATIVE_POLARITY else TRUE)


def merge_conditions(
    previous: Iterable[Mapping[str, Any]] | None,
    verdicts: Iterable[Verdict],
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """The conditions to write: each verdict, keeping the old transition time if unchanged.

    Conditions of other types that were set before and are not in `verdicts` are dropped, so
    a condition that no longer applies (e.g. Conflict) disappears instead of going stale.
    """
    old = {c.get("type"): c for c in previous or [] if isinstance(c, Mapping)}
    merged: list[dict[str, Any]] = []
    stamp = timestamp(now)
    for v in verdicts:
        before = old.get(v.type)
        moved = before is None or before.get("status") != v.status
        cond: dict[str, Any] = {
            "type": v.type,
            "status": v.status,
            "reason": v.reason,
            "message": v.message[:MAX_MESSAGE],
            "lastTransitionTime": stamp
            if moved or before is None
            else before.get("lastTransitionTime", stamp),
        }
        if generation is not None:
            cond["observedGeneration"] = generation
        merged.append(cond)
    return merged


def flipped(previous: Iterable[Mapping[str, Any]] | None, verdict: Verdict) -> bool:
    """Whether `verdict` changes the condition's status or reason (worth an Event)."""
    for c in previous or []:
        if c.get("type") == verdict.type:
            return bool(c.get("status") != verdict.status or c.get("reason") != verdict.reason)
    return True
