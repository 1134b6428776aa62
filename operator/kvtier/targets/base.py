"""The protocol every target kind implements: what kvtier watches, reads, writes and takes
back on one kind of model server object.

A kind is one module under kvtier/targets/ with one object that has these members, listed in
registry.py. Kind modules never import each other: what two kinds share lives in pod.py (a
pod template that runs vLLM), patch.py (the writes), facts.py (the readers), offload.py (what
a plan gives a model server).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kvtier.render.result import DesiredWrite
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.targets.facts import TargetFacts
from kvtier.targets.offload import Offload

# Objects of the kinds a target kind `reads` (its Related), as the API returns them; None when
# they were not read (an offline plan, or a cluster that serves none of those kinds).
RelatedObjects = Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True)
class Related:
    """A kind a target kind reads, never writes, because it holds part of the pod another
    controller builds (KServe's ServingRuntimes for an InferenceService)."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool  # True: only those of the target's namespace count


@dataclass(frozen=True)
class Conflict:
    """The target already carries an offload config kvtier did not write."""

    message: str


class Kind(Protocol):
    """One kind of model server object kvtier writes its tier to. The CRD's targetRef (its
    kind enum and apiVersion rule), the informers, the cache, the REST plurals and the
    operator's RBAC are generated from these members of the registered kinds."""

    kind: str  # "InferenceService"
    group: str  # "serving.kserve.io"
    versions: tuple[str, ...]  # the served versions kvtier reads and writes, preferred first
    plural: str  # "inferenceservices"
    # How to get a schema that declares granular the parts kvtier writes, for the AtomicSpec
    # refusal (policy/atomic.py): "install ..., which declare these parts granular".
    schema_advice: str
    # Whether the object's endpoint picker takes its version from LLMInferenceServiceConfigs
    # (render/picker_version.py): the operator then gives decide the ones it may read.
    reads_picker_configs: bool
    # The kinds whose objects `facts` and `writes` get as `related` (watched, read-only RBAC).
    reads: tuple[Related, ...]

    def facts(self, obj: Mapping[str, Any], related: RelatedObjects = None) -> TargetFacts:
        """What sizing needs from the pods the object gives (any of `versions`): model,
        parallelism, replicas, the vLLM flags, the roles and their pods."""
        ...

    def scheduler(
        self, obj: Mapping[str, Any], offload: Offload, layout: bool | SchedulerProblem
    ) -> SchedulerSync | SchedulerProblem | None:
        """The router's CPU-tier scorer kvtier keeps in step for the object (render/scheduler.py;
        `layout` as there); None for a kind without a router, or when no scorer is enabled."""
        ...

    def writes(
        self,
        obj: Mapping[str, Any],
        offload: Offload,
        scheduler: SchedulerSync | SchedulerProblem | None = None,
        related: RelatedObjects = None,
    ) -> list[DesiredWrite] | Conflict:
        """The writes that put the tier on the object (JSON patches of atomic lists first,
        then the apply), or a Conflict when it already carries an offload config of someone
        else's. `scheduler`: what `scheduler()` returned, or the scorer of a ConfigMap."""
        ...

    def unapply(self, obj: Mapping[str, Any]) -> list[DesiredWrite]:
        """What takes kvtier's fields back: one JSON patch, all or nothing, that removes
        kvtier's items and record and puts back the user's own values; [] when kvtier left
        nothing on the object."""
        ...

    def users_part(self, obj: Mapping[str, Any], part: str) -> bool:
        """Whether the part of spec at the dotted path `part` is the user's (someone other
        than kvtier writes it): kvtier writes only pod templates that are."""
        ...
