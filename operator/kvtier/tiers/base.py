"""The protocol every tier type implements: its names, what it provisions for a KVCacheTier,
what the vLLM pods mount, its probe and its evictor.

A tier type is one module under kvtier/tiers/ with one object that has these members, listed
in registry.py. Tier modules never import each other: what two share lives here (the records
they return) and in common.py (the evictor's settings).

This module imports no target kind and no tier module: the target kinds read the claim
records below (targets/pod.py mounts them), and render/probe_job.py the probe volume.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kvtier.names.labels import TierRef
from kvtier.render.evictor import EvictorSettings
from kvtier.render.result import DesiredWrite

if TYPE_CHECKING:  # the target kinds read the claims here, and never the settings
    from kvtier.api.policy import KVCachePolicySpec
    from kvtier.api.tier import KVCacheTierSpec
    from kvtier.settings import EffectiveSettings
    from kvtier.sizing import SizingPlan


@dataclass(frozen=True)
class SharedClaim:
    """A claim every replica mounts (one cache for all of them)."""

    name: str

    def volume(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The pod volume `name` on the claim (`labels` are for a per-pod claim only)."""
        return {"name": name, "persistentVolumeClaim": {"claimName": self.name}}


@dataclass(frozen=True)
class PerPodClaim:
    """A claim template, one claim per pod (a volume of the node the pod runs on)."""

    spec: Mapping[str, Any]

    def volume(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The pod volume `name`: an ephemeral claim of `spec`. A model server's template
        carries no labels (KServe's schema prunes them); the probe Job's carries its own."""
        if labels is None:
            template: dict[str, Any] = {"spec": copy.deepcopy(dict(self.spec))}
        else:
            template = {"metadata": {"labels": dict(labels)}, "spec": dict(self.spec)}
        return {"name": name, "ephemeral": {"volumeClaimTemplate": template}}


Claim = SharedClaim | PerPodClaim


@dataclass(frozen=True)
class TierRequest:
    """What a tier type provisions from: the KVCacheTier, its effective settings, the sizing
    plan, the cluster's nodes, the target's replicas, and the operator's own image for the
    evictor (None: no evictor)."""

    tier: TierRef
    spec: KVCacheTierSpec
    settings: EffectiveSettings
    sizing: SizingPlan
    nodes: Sequence[Mapping[str, Any]] = ()
    replicas: int = 1
    evictor_image: str | None = None


@dataclass(frozen=True)
class Provision:
    """What one tier type gives a KVCacheTier: the objects written before the target's own
    writes (in order), the notes status.plan shows, and what the model server's pods get."""

    writes: tuple[DesiredWrite, ...] = ()
    notes: tuple[str, ...] = ()
    claim: Claim | None = None  # the volume the vLLM pods mount at the fs tier's root
    # A per-pod tier's evictor: a native sidecar beside vLLM on the pod's own volume.
    sidecar: EvictorSettings | None = None
    # One PYTHONHASHSEED for replicas that share the cache (vLLM releases that hash with it).
    python_hash_seed: str | None = None
    # The user's Secret whose object store keys the vLLM container gets by reference.
    credentials_secret: str | None = None


@dataclass(frozen=True)
class ProbeVolume:
    """The volume the storage probe (render/probe_job.py) runs fio on: the claim the model
    server gets, on a node the tier's pods may land on."""

    disk: str  # the tier type's name: part of the Job's name
    claim: Claim
    node_selector: Mapping[str, str] = field(default_factory=dict)


class TierType(Protocol):
    """One type of KV-cache tier: the CPU tier every plan has, or a secondary (disk) tier.

    `name` is the API's (spec.disk.type, SizingPlan.disk, the topology CPUAnd<name>);
    kvtier.sizing.disk_types holds what the sizing engine knows of each disk type (its vLLM
    tier type and whether replicas share it), which a unit test keeps equal to the members
    here."""

    name: str  # "NVMe"; "CPU" for the CPU tier
    status_name: str  # status.tiers[].name: "nvme"
    vllm_type: str | None  # vLLM's secondary tier type: "fs" or "obj"; None: the CPU tier
    shared: bool  # one cache for all replicas (a shared claim, a bucket)
    evicted: bool  # `kvtier evict` keeps it below its capacity (status DiskPressure)

    def available(
        self,
        spec: KVCacheTierSpec,
        settings: EffectiveSettings,
        nodes: Sequence[Mapping[str, Any]],
        eligible: Set[str],
    ) -> bool:
        """Whether the cluster offers this type to the KVCacheTier (Auto may choose it, and a
        forced type is refused when it is not). `eligible`: the names of the nodes the model
        server may land on."""
        ...

    def provision(self, request: TierRequest) -> Provision:
        """The objects and the claim of the tier, or RenderError when the inputs cannot work
        (reason and message for the Provisioned condition)."""
        ...

    def policy_writes(
        self, policy: KVCachePolicySpec | None, settings: EffectiveSettings
    ) -> list[DesiredWrite]:
        """The cluster-scoped objects of this type only the KVCachePolicy writes (shared by
        every tier of the type): from the policy, and its settings (which depend on no tier)."""
        ...

    def probe_volume(
        self,
        request: TierRequest,
        writes: Sequence[DesiredWrite],
        disk_status: Mapping[str, Any],
    ) -> ProbeVolume | None:
        """The volume fio measures for the tier (None: nothing to probe). `writes` are the
        tier's rendered writes, `disk_status` its status.tiers entry as the cluster shows it."""
        ...

    def evictor_pods(self, tier: TierRef, target: str, claim: str | None) -> str | None:
        """The name prefix of the pods whose evictor gauges tell the tier's fill (target:
        the model server's name, claim: the tier's shared claim); None when there is none
        (yet)."""
        ...

    def status_text(self, sizing: SizingPlan, settings: EffectiveSettings, capacity: object) -> str:
        """The tier's column in `kubectl get kvt` (status.cpuTier or status.diskTier);
        `capacity` is the claimed quantity the cluster shows, if any."""
        ...
