"""The Events of one reconcile: which verdicts are news to a person, and the writes told
once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.api.tier import ConditionType
from kvtier.policy.conditions import UNKNOWN, Verdict
from kvtier.render import DesiredWrite

READY_APPLIED = "Applied"  # Ready's reason in Apply mode, and the reason of a writes Event


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def writes_summary(writes: Sequence[DesiredWrite]) -> str:
    head = "; ".join(f"{w.action} {w.summary}" for w in writes[:3])
    more = f" (+{len(writes) - 3} more)" if len(writes) > 3 else ""
    return f"{len(writes)} write(s): {head}{more}"


def announce(events: Sequence[Event], written: Sequence[DesiredWrite]) -> list[Event]:
    """The Events of one reconcile. The writes are told once: inside the Ready=Applied
    Event when the same reconcile made the tier ready (one Event for a new tier, not two),
    else in an Event of their own."""
    if not written:
        return list(events)
    summary = writes_summary(written)
    out = []
    folded = False
    for e in events:
        if not folded and e.type == "Normal" and e.reason == READY_APPLIED:
            e = Event(e.type, e.reason, f"{e.message}: {summary}")
            folded = True
        out.append(e)
    return out if folded else [Event("Normal", READY_APPLIED, summary), *out]


def newsworthy(previous: Sequence[Mapping[str, Any]], v: Verdict) -> bool:
    """Events tell a person what changed, not every first fact: a new tier gets one for its
    Ready state plus one per problem (a state not known yet, such as metrics still awaited,
    is none); a later change of any condition gets its own."""
    seen = any(c.get("type") == v.type for c in previous)
    return seen or v.type == ConditionType.READY or (not v.ok and v.status != UNKNOWN)


def event_type(v: Verdict) -> str:
    """Warning for a problem; a condition that is fine, or not known yet, is Normal."""
    return "Normal" if v.ok or v.status == UNKNOWN else "Warning"
