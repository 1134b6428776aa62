"""What rendering returns: the writes Apply mode performs, which Plan mode reports as is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # render.scheduler imports the targets, which import this module
    from kvtier.render.scheduler import SchedulerProblem, SchedulerSync

# Apply: server-side apply of `body` (a target's one write, its atomic lists carried whole
# under a generation `guard`). Patch: the JSON patch `body["jsonPatch"]` (a take-back,
# guarded by test ops). Delete.
Action = Literal["Apply", "Patch", "Delete"]
# status.plan.actions holds at most this many entries (KVCacheTier CRD).
PLAN_ACTIONS_MAX = 64


class RenderError(ValueError):
    """The inputs cannot produce a valid set of writes; reason is a condition reason, and
    condition the type it is reported on (False)."""

    def __init__(self, reason: str, message: str, condition: str = "Provisioned") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.condition = condition


@dataclass(frozen=True)
class DesiredWrite:
    """One object kvtier applies (server-side, field manager kvtier-operator) or deletes.

    For Apply, body is the complete apply configuration: exactly the fields kvtier owns;
    for Patch, {"jsonPatch": [ops]}. `carried`: the dotted paths of atomic lists an Apply
    carries whole (the user's items with kvtier's, as read); `guard`: the object's
    metadata.generation they were read at: the apply is sent only while the object is still
    at it, with the resourceVersion read then as its precondition (None: unguarded).
    """

    action: Action
    api_version: str
    kind: str
    name: str
    namespace: str | None  # None for cluster-scoped kinds
    body: dict[str, Any]
    summary: str
    carried: tuple[str, ...] = ()
    guard: int | None = None

    def writes_to(self, obj: Mapping[str, Any] | None) -> bool:
        """Whether this write is to `obj` itself (by kind, namespace and name): a target's
        kind may also be one kvtier writes for itself (an evictor Deployment)."""
        meta = (obj or {}).get("metadata") or {}
        return (self.kind, self.namespace, self.name) == (
            (obj or {}).get("kind"),
            meta.get("namespace"),
            meta.get("name"),
        )

    def planned_action(self) -> dict[str, Any]:
        """The status.plan.actions[] entry (PlannedAction shape, camelCase)."""
        entry: dict[str, Any] = {
            "action": self.action,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "summary": self.summary,
            "body": self.body,
        }
        if self.namespace is not None:
            entry["namespace"] = self.namespace
        return entry


@dataclass(frozen=True)
class RenderResult:
    """The writes in apply order (Ceph pool, StorageClass, PersistentVolumes, claims, the
    target's last), or a conflict: the target already has an offload config kvtier did not set,
    in which case writes is empty and nothing may be applied."""

    writes: list[DesiredWrite] = field(default_factory=list)
    conflict: str | None = None
    notes: list[str] = field(default_factory=list)
    # The router's CPU-tier scorer of an LLMInferenceService: in step, or why not.
    scheduler: SchedulerSync | SchedulerProblem | None = None

    @property
    def summary(self) -> str:
        """The plan for a person: one line per write, then the notes."""
        if self.conflict is not None:
            return f"Conflict: {self.conflict}"
        lines = [f"{w.action} {w.summary}" for w in self.writes]
        return "\n".join([*lines, *(f"Note: {n}" for n in self.notes)])

    def plan_status(self) -> dict[str, Any]:
        """status.plan: the summary and the actions. Past the CRD's cap (many NVMe nodes) the
        middle entries (PersistentVolumes) are left out of actions, never the target's writes
        at the end; the summary still names every write."""
        actions = [w.planned_action() for w in self.writes]
        if len(actions) > PLAN_ACTIONS_MAX:
            last = self.writes[-1]
            tail = 0
            for w in reversed(self.writes):
                if (w.kind, w.name) != (last.kind, last.name):
                    break
                tail += 1
            actions = [*actions[: PLAN_ACTIONS_MAX - tail], *actions[-tail:]]
        return {"summary": self.summary, "actions": actions}
