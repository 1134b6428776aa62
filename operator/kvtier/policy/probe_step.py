"""The probe of a disk tier as one reconcile sees it: the volume to probe, the previous
result and the Jobs and Pods kvtier owns, handed to plan_probe."""

from __future__ import annotations

from collections.abc import Sequence

from kvtier.api.common import quantity_bytes
from kvtier.policy.contract import Decision, Facts, meta
from kvtier.policy.probing import ProbeStep, plan_probe
from kvtier.policy.status_shape import DISK_TIER_NAMES
from kvtier.render import DesiredWrite, TierRef
from kvtier.render.nvme import nvme_claim_spec
from kvtier.render.probe_job import CephFSProbeVolume, NVMeProbeVolume
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan


def probe_step(
    ref: TierRef,
    eff: EffectiveSettings,
    sp: SizingPlan,
    tier_writes: Sequence[DesiredWrite],
    decision: Decision,
    provisioned: bool,
    facts: Facts,
) -> ProbeStep:
    volume: NVMeProbeVolume | CephFSProbeVolume
    if sp.disk == "NVMe" and eff.nvme_pool is not None:
        pv = next((w for w in tier_writes if w.kind == "PersistentVolume"), None)
        capacity = quantity_bytes(  # a StorageClass pool has no PV, only its claim size
            pv.body["spec"]["capacity"]["storage"]
            if pv
            else decision.disk_status["capacityQuantity"]
        )
        volume = NVMeProbeVolume(
            nvme_claim_spec(ref, eff.nvme_pool, capacity), eff.nvme_pool.node_selector
        )
    else:
        volume = CephFSProbeVolume(str(decision.disk_status.get("claimName", "")))
    owned = list(facts.owned.values())
    prev = next(
        (
            t.get("probe")
            for t in (facts.tier.get("status") or {}).get("tiers") or []
            if t.get("name") == DISK_TIER_NAMES[str(sp.disk)]
        ),
        None,
    )
    return plan_probe(
        tier=ref,
        generation=int(meta(facts.tier, "generation") or 0),
        annotations=meta(facts.tier, "annotations") or {},
        disk=str(sp.disk),
        volume=volume,
        provisioned=provisioned,
        target=facts.target,
        allow_while_serving=eff.probe_allow_while_serving.value,
        previous=prev,
        jobs=[o for o in owned if o.get("kind") == "Job"],
        pods=[o for o in owned if o.get("kind") == "Pod"],
        image=facts.probe_image,
        block_bytes=sp.fio_block_size,
        runtime_seconds=eff.probe_runtime_seconds.value,
        now=facts.now,
        schedule=eff.probe_schedule.value,
    )
