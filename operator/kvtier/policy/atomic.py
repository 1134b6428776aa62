"""Applied=False before any write whose apply would replace a part of the target the user
filled: the served schema says which parts merge and which are replaced whole
(render/served_schema.py). Nothing of the tier is written then, so nothing is half-applied.

The atomic lists a kind carries whole on purpose (DesiredWrite.carried: the user's items as
read with kvtier's, under the resourceVersion guard) lose nothing of the user's and are not
refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.tier import ConditionType
from kvtier.policy.conditions import FALSE, Verdict
from kvtier.render import DesiredWrite
from kvtier.render.served_schema import replaced_parts
from kvtier.targets.registry import registered


def atomic_verdict(
    schemas: Mapping[str, Mapping[str, Any] | None],
    writes: Sequence[DesiredWrite],
    target: Mapping[str, Any],
) -> Verdict | None:
    """Applied=False when an apply among `writes` to the target would replace an atomic part
    it holds (AtomicSpec), each apply judged by the served schema of the version it is sent
    as (`schemas`, by apiVersion: an object read as v1alpha2 may be written as v1alpha1), or
    when that schema could not be read (SchemaUnknown: whether the apply merges cannot be
    known); None when every apply only merges."""
    kind = str(target.get("kind"))
    applies = [w for w in writes if w.action == "Apply" and w.writes_to(target)]
    if not applies:
        return None
    unknown = sorted({w.api_version for w in applies if schemas.get(w.api_version) is None})
    if unknown:
        return Verdict(
            ConditionType.APPLIED.value,
            FALSE,
            "SchemaUnknown",
            f"the API server's schema of {kind} {', '.join(unknown)} could not be read (GET "
            "/openapi/v3): without it kvtier cannot tell which parts an apply would replace, "
            "so it writes nothing; it tries again at the next change or re-check",
        )
    found = {
        (w.api_version, p)
        for w in applies
        for p in replaced_parts(schemas[w.api_version] or {}, w.body, target)
        if not _carried(p, w.carried)
    }
    if not found:
        return None
    version = sorted({v for v, _ in found})[0]
    parts = sorted(p for _, p in found)
    registered_kind = registered(kind)
    fix = (  # the kind's own advice on getting a schema that declares these parts granular
        registered_kind.schema_advice
        if registered_kind is not None
        else f"give the {kind} CRD a structural schema for these parts"
    )
    return Verdict(
        ConditionType.APPLIED.value,
        FALSE,
        "AtomicSpec",
        f"the {kind} {version} schema the API server serves declares {', '.join(parts)} "
        f"atomic: an apply of kvtier's fields would replace what the user set there, so "
        f"kvtier writes nothing; {fix}",
    )


def _carried(part: str, carried: Sequence[str]) -> bool:
    """Whether the dotted part is, or lies inside, an atomic list the write carries whole."""
    return any(part == c or part.startswith((f"{c}.", f"{c}[")) for c in carried)
