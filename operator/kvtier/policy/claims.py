"""One tier per model server: which Apply-mode tier owns a target two tiers name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.api.tier import Mode
from kvtier.names import FINALIZER
from kvtier.policy.contract import Facts, meta


def claimed_by(facts: Facts, mode: str) -> str | None:
    """The older Apply-mode tier that owns this tier's target, if any: two tiers applying to
    one model server would overwrite each other forever."""
    if mode != Mode.APPLY:
        return None
    me = claim_key(facts.tier)
    older = sorted(r for r in facts.rivals if r < me)
    return older[0][2] if older else None


def claim_key(tier: Mapping[str, Any]) -> tuple[int, str, str]:
    """Who owns a contested target: a tier that has already applied (holds kvtier's
    finalizer) before one that has not, then the older, then by name (timestamps are whole
    seconds)."""
    holds = FINALIZER in (meta(tier, "finalizers") or [])
    return (
        0 if holds else 1,
        str(meta(tier, "creationTimestamp") or ""),
        str(meta(tier, "name")),
    )
