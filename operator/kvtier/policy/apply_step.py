"""Apply mode's step after rendering: the writes still needed and those held back, and
whether the cluster shows the tier provisioned and applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.tier import KVCacheTierSpec
from kvtier.policy.capacity import capacity_verdict
from kvtier.policy.conditions import Verdict
from kvtier.policy.contract import Decision, Facts, meta
from kvtier.policy.placement import Placement
from kvtier.policy.provisioning import (
    applied_verdict,
    disk_tier_status,
    hold_unkept,
    object_key,
    pending_writes,
    provisioned_verdict,
    schema_mismatch_verdict,
)
from kvtier.render import DesiredWrite, TierRef
from kvtier.render.quantities import to_quantity
from kvtier.render.writes import prune_writes
from kvtier.settings import NVMePoolSettings
from kvtier.sizing import SizingPlan
from kvtier.targets.facts import TargetFacts
from kvtier.tiers.nvme import eligible_nodes, nvme_capacity_bytes, recycle_released_volumes

STORAGE_KINDS = ("PersistentVolume", "PersistentVolumeClaim")


def _pod_owned(obj: Mapping[str, Any]) -> bool:
    return any(r.get("kind") == "Pod" for r in meta(obj, "ownerReferences") or [])


def apply_step(
    decision: Decision,
    spec: KVCacheTierSpec,
    sp: SizingPlan,
    target: TargetFacts,
    facts: Facts,
    place: Placement,
    ref: TierRef,
    tier_writes: list[DesiredWrite],
    class_pool: NVMePoolSettings | None,
    storage_class: Mapping[str, Any] | None,
) -> tuple[Verdict, Verdict]:
    """Sets the writes Apply mode still makes (cleanup first), those held back and the disk
    tier's status on the decision; returns the Provisioned and Applied verdicts, in that
    order. `class_pool` is the NVMe pool of a StorageClass tier, `storage_class` its class."""
    observed = dict(facts.owned)
    if facts.target is not None:
        t_meta = facts.target.get("metadata") or {}
        observed[(target.kind, t_meta.get("namespace"), str(t_meta.get("name")))] = facts.target
    for configmap in facts.scheduler_configmaps:
        observed[object_key(configmap)] = configmap
    storage = [
        o
        for o in facts.owned.values()
        if o.get("kind") in STORAGE_KINDS and not _pod_owned(o)  # not a pod's ephemeral claim
    ]
    evictors = [o for o in facts.owned.values() if o.get("kind") == "Deployment"]
    cleanup = [
        *prune_writes(ref, [*storage, *evictors], tier_writes),
        *recycle_released_volumes(storage),
    ]
    pending = pending_writes([*cleanup, *tier_writes], observed)
    decision.writes, held = hold_unkept(pending, facts.unkept, observed)
    decision.held = [w for w, _ in held]
    target_writes = [w for w in tier_writes if w.writes_to(facts.target)]
    decision.disk_status = disk_tier_status(sp.disk, tier_writes, observed)
    applied = (
        schema_mismatch_verdict(held) if held else applied_verdict(target_writes, facts.target)
    )
    decision.applied = applied.ok
    provisioned = provisioned_verdict(sp.disk, tier_writes, observed)
    class_name = class_pool.storage_class_name if class_pool else None
    if class_pool is not None and class_name is not None:
        requested = spec.disk.nvme.size if spec.disk and spec.disk.nvme else None
        claim_bytes = nvme_capacity_bytes(
            None if requested is None else quantity_bytes(requested), class_pool
        )
        nodes = [
            n
            for n in eligible_nodes(facts.nodes, class_pool.node_selector)
            if meta(n, "name") in place.eligible_nodes
        ]
        provisioned = capacity_verdict(
            class_pool.name,
            class_name,
            storage_class,
            facts.capacities,
            nodes,
            claim_bytes,
            target.replicas,
            applied.ok,
        )
        decision.disk_status = {
            "capacityQuantity": to_quantity(claim_bytes),
            "ready": provisioned.ok and applied.ok,
        }
        if not provisioned.ok:
            # Claims no node can provision would leave the restarted model server Pending.
            decision.writes = [w for w in decision.writes if w.action == "Delete"]
    return provisioned, applied
