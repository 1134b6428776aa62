"""What `decide` reads and what it returns: the facts of one KVCacheTier, read off the
cluster, and the decision the operator then makes true."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kvtier.api.observation import Observation
from kvtier.policy.conditions import Verdict
from kvtier.policy.events import Event
from kvtier.policy.probing import ProbeStep
from kvtier.policy.provisioning import Unkept, UnkeptKey
from kvtier.render import DesiredWrite, RenderError, RenderResult
from kvtier.render.picker_version import KSERVE_NAMESPACE
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.targets.facts import TargetFacts

DEFAULT_PROBE_IMAGE = "quay.io/kvtier/kvtier-operator:0.1.0"


@dataclass
class Worked:
    """What a decision worked out from the target as it read it (`basis`): the target's facts
    (or why it cannot be configured), the rendered writes (or why none), and whether an apply
    would replace a part of it whole. The decision from the answers to those writes reuses
    them when those answers are the basis with kvtier's writes and nothing else
    (policy/answers.py): rendering is idempotent, so rendering from the answers would give
    the same writes and plan (tests/unit/test_decide_reuse.py checks it for every golden
    case). Only the steps that judge the cluster (what is still to write, what it shows) run
    again."""

    basis: Mapping[str, Any]
    found: TargetFacts | Verdict | None = None
    render: RenderResult | RenderError | None = None
    atomic: Verdict | None = None
    atomic_checked: bool = False


@dataclass(frozen=True)
class Facts:
    """Everything `decide` reads. Objects are dicts as the API returns them."""

    tier: Mapping[str, Any]
    policy: Mapping[str, Any] | None
    target: Mapping[str, Any] | None
    config_map: Mapping[str, Any] | None  # the referenced ConfigMap, None if absent
    nodes: Sequence[Mapping[str, Any]]
    now: datetime
    # Objects kvtier wrote for this tier (PVs, PVCs), keyed by (kind, namespace, name).
    owned: Mapping[tuple[str, str | None, str], Mapping[str, Any]] = field(default_factory=dict)
    # The operator's own image runs `kvtier probe` and the disk tiers' `kvtier evict`.
    probe_image: str = DEFAULT_PROBE_IMAGE
    # Other Apply-mode tiers naming the same target, as claim_key() of each.
    rivals: Sequence[tuple[int, str, str]] = ()
    # Writes the API server answered without keeping them, by object (see Unkept).
    unkept: Mapping[UnkeptKey, Unkept] = field(default_factory=dict)
    # The latest reading of the target's vLLM metrics (kvtier.observe), None when none.
    observation: Observation | None = None
    # StorageClasses by name and every CSIStorageCapacity, for StorageClass NVMe pools.
    storage_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacities: Sequence[Mapping[str, Any]] = ()
    # ConfigMaps of the tier's namespace the scheduler sync reads: the one the target's
    # spec.router.scheduler.config.ref names, and any carrying this tier's record.
    scheduler_configmaps: Sequence[Mapping[str, Any]] = ()
    # Names of those the operator may not patch (they answered 403).
    scheduler_forbidden: frozenset[str] = frozenset()
    # The LLMInferenceServiceConfigs the endpoint picker's version may come from, by
    # (namespace, name), as read (render/picker_version.py); None when none were read.
    llmisvc_configs: Mapping[tuple[str, str], Mapping[str, Any]] | None = None
    kserve_namespace: str = KSERVE_NAMESPACE
    # The objects of the kinds the target's kind reads (Kind.reads: an InferenceService's
    # ServingRuntimes and ClusterServingRuntimes), None when the cluster serves none of them.
    related: Sequence[Mapping[str, Any]] | None = None
    # The schemas the API server serves for the target's kind, by apiVersion (its OpenAPI v3
    # components, render/served_schema.py): each write is checked against the schema of the
    # version it is sent as. A version without one (not read) gets no apply.
    target_schemas: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    # When no target was found and the tier names its apiVersion: the apiVersions the cluster
    # serves the target's kind in (its OpenAPI index); None when not read or not known.
    target_versions: tuple[str, ...] | None = None
    # What the decision before this reconcile's writes worked out from the target, when the
    # writes' answers are that target with kvtier's writes and nothing else (see Worked).
    worked: Worked | None = None


@dataclass
class Decision:
    """What the operator should make true for one tier."""

    mode: str
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    sizing: SizingPlan | None = None
    settings: EffectiveSettings | None = None
    target: TargetFacts | None = None
    # Apply mode: the writes still needed (in order), and every object the tier owns now.
    writes: list[DesiredWrite] = field(default_factory=list)
    # Writes held back: the server did not keep them last time (Applied SchemaMismatch).
    held: list[DesiredWrite] = field(default_factory=list)
    desired: list[DesiredWrite] = field(default_factory=list)
    disk_status: dict[str, Any] = field(default_factory=dict)
    applied: bool = False  # the target carries the configuration (Apply mode)
    probe: ProbeStep | None = None
    policy_problems: list[tuple[str, str]] = field(default_factory=list)
    worked: Worked | None = None  # what this decision worked out from the target


def meta(obj: Mapping[str, Any], key: str) -> Any:
    """A field of an object's metadata, None when it has none."""
    return (obj.get("metadata") or {}).get(key)
