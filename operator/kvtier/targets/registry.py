"""The one list of target kinds, and the lookups policy/ and render/ ask it.

A kind that is not registered is never read nor written as another one: the lookups raise a
RenderError (reason UnsupportedTarget) that names the known kinds and versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.targets.base import Conflict, Kind, RelatedObjects
from kvtier.targets.deployment import DEPLOYMENT
from kvtier.targets.facts import TargetFacts
from kvtier.targets.inference_service import INFERENCE_SERVICE
from kvtier.targets.llm_inference_service import LLM_INFERENCE_SERVICE
from kvtier.targets.lws import LEADER_WORKER_SET
from kvtier.targets.offload import Offload
from kvtier.targets.pod import recorded
from kvtier.targets.statefulset import STATEFUL_SET

KINDS: tuple[Kind, ...] = (
    INFERENCE_SERVICE,
    LLM_INFERENCE_SERVICE,
    DEPLOYMENT,
    STATEFUL_SET,
    LEADER_WORKER_SET,
)
UNSUPPORTED_REASON = "UnsupportedTarget"

_BY_KIND = {k.kind: k for k in KINDS}
_BY_VERSION = {(f"{k.group}/{v}", k.kind): k for k in KINDS for v in k.versions}


def api_versions(kind: Kind) -> tuple[str, ...]:
    """The kind's apiVersions, preferred first."""
    return tuple(f"{kind.group}/{v}" for v in kind.versions)


def known_kinds() -> str:
    """The registered kinds and their versions, for a person."""
    return ", ".join(f"{k.kind} {k.group}/{'|'.join(sorted(k.versions))}" for k in KINDS)


def _unsupported(what: str, condition: str = "Provisioned") -> RenderError:
    return RenderError(
        UNSUPPORTED_REASON, f"{what} is not a supported target ({known_kinds()})", condition
    )


def _version(target: Mapping[str, Any]) -> tuple[str, str]:
    return str(target.get("apiVersion", "")), str(target.get("kind", ""))


def registered(kind: str) -> Kind | None:
    """The registered kind of that name, None when there is none."""
    return _BY_KIND.get(kind)


def kind_named(kind: str) -> Kind:
    """The registered kind of that name, else RenderError."""
    found = _BY_KIND.get(kind)
    if found is None:
        raise _unsupported(kind, "TargetFound")
    return found


def target_kind(target: Mapping[str, Any]) -> Kind:
    """The registered kind that writes the target at its apiVersion, else RenderError."""
    version, kind = _version(target)
    found = _BY_VERSION.get((version, kind))
    if found is None:
        raise _unsupported(f"{kind} {version}")
    return found


def target_facts(target: Mapping[str, Any], related: RelatedObjects = None) -> TargetFacts:
    """The target's facts, by its kind (every version of a kind reads alike), from the
    objects of the kinds it reads; RenderError on the TargetFound condition for a kind that
    is not registered."""
    version, kind = _version(target)
    found = _BY_KIND.get(kind)
    if found is None:
        raise _unsupported(f"{kind} {version}", "TargetFound")
    return found.facts(target, related)


def target_patch(
    target: Mapping[str, Any],
    offload: Offload,
    scheduler: SchedulerSync | SchedulerProblem | None = None,
    related: RelatedObjects = None,
) -> list[DesiredWrite] | Conflict:
    """The writes for the target (its kind's `writes`), or a Conflict; RenderError for a
    target no registered kind writes."""
    return target_kind(target).writes(target, offload, scheduler, related)


def unapply_writes(target: Mapping[str, Any]) -> list[DesiredWrite]:
    """What takes kvtier's fields back from the target (its kind's `unapply`); [] when kvtier
    left nothing there."""
    if not recorded(target):
        return []
    return target_kind(target).unapply(target)
