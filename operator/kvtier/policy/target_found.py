"""TargetFound: the target's facts, by its kind's module, or the condition that says why
there are none (a kind no module reads, a version the cluster does not serve, no object)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.api.tier import ConditionType, TargetRef
from kvtier.policy.conditions import FALSE, Verdict
from kvtier.render import RenderError
from kvtier.targets.base import RelatedObjects
from kvtier.targets.facts import TargetFacts
from kvtier.targets.registry import api_versions, registered, target_facts


def target_facts_or_refusal(
    obj: Mapping[str, Any], related: RelatedObjects
) -> TargetFacts | Verdict:
    """The target's facts, or TargetFound=False for a kind no target module reads (the
    KVCacheTier CRD admits none: only facts made by hand get here)."""
    try:
        return target_facts(obj, related)
    except RenderError as exc:
        return Verdict(exc.condition, FALSE, exc.reason, exc.message)


def not_found(ref: TargetRef, ns: str, served: tuple[str, ...] | None) -> Verdict:
    """TargetFound=False: the version the tier names is not one the cluster serves its kind
    in (the object may well exist in another), else no such object."""
    if ref.api_version is not None and served is not None and ref.api_version not in served:
        where = (
            f"serves {ref.kind} in {', '.join(served)}"
            if served
            else f"serves no {ref.kind} in group {ref.api_version.rpartition('/')[0]} (is its "
            "CRD installed?)"
        )
        return Verdict(
            ConditionType.TARGET_FOUND.value,
            FALSE,
            "TargetVersionNotServed",
            f"spec.targetRef.apiVersion {ref.api_version}: the cluster does not serve {ref.kind} "
            f"in that version; it {where}. Set spec.targetRef.apiVersion to a served version "
            f"kvtier supports ({supported(ref.kind)}), or leave it out (the first of them the "
            "cluster serves)",
        )
    return Verdict(
        ConditionType.TARGET_FOUND.value,
        FALSE,
        "TargetNotFound",
        f"spec.targetRef: {ref.kind} {ns}/{ref.name} not found; sizing waits for it",
    )


def supported(kind: str) -> str:
    found = registered(kind)
    return ", ".join(api_versions(found)) if found is not None else "none for this kind"
