"""The probe of a disk tier as one reconcile sees it: the volume to probe (what the tier type
names, kvtier.tiers), the previous result and the Jobs and Pods kvtier owns, handed to
plan_probe."""

from __future__ import annotations

from kvtier.policy.contract import Facts, meta
from kvtier.policy.probing import ProbeStep, plan_probe
from kvtier.render import TierRef
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.tiers.base import ProbeVolume, TierType


def probe_step(
    ref: TierRef,
    tier_type: TierType,
    volume: ProbeVolume,
    eff: EffectiveSettings,
    sp: SizingPlan,
    provisioned: bool,
    facts: Facts,
) -> ProbeStep:
    owned = list(facts.owned.values())
    prev = next(
        (
            t.get("probe")
            for t in (facts.tier.get("status") or {}).get("tiers") or []
            if t.get("name") == tier_type.status_name
        ),
        None,
    )
    return plan_probe(
        tier=ref,
        generation=int(meta(facts.tier, "generation") or 0),
        annotations=meta(facts.tier, "annotations") or {},
        disk=tier_type.name,
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
