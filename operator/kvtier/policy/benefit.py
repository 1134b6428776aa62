"""TierBeneficial: whether restoring from the chosen disk tier beats recomputing, and the
nonBeneficialTier: Drop rule that leaves a losing tier out."""

from __future__ import annotations

from dataclasses import replace

from kvtier.api.policy import NonBeneficialAction
from kvtier.api.tier import ConditionType, KVCacheTierSpec
from kvtier.policy.conditions import FALSE, TRUE, UNKNOWN, Verdict
from kvtier.policy.contract import Decision, Facts
from kvtier.policy.gate import gate_tier, plan_share
from kvtier.policy.observed_health import measured_prefill, observed_evidence
from kvtier.policy.status_shape import measured
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan


def tier_beneficial(
    sp: SizingPlan,
    spec: KVCacheTierSpec,
    eff: EffectiveSettings,
    decision: Decision,
    facts: Facts,
) -> list[Verdict]:
    """TierBeneficial from the latest probe of the chosen disk tier (restore vs recompute)."""
    if sp.disk is None:
        return []
    step = decision.probe
    probe = (step.result if step and step.result else None) or measured(
        (facts.tier.get("status") or {}).get("tiers") or []
    ).get(sp.disk)
    if not probe or probe.get("p99Seconds") is None:
        return []
    verdict = gate_tier(
        probe,
        sp.sizing.block_bytes,
        spec.workload.average_context_tokens,
        spec.probe.baseline_ttft_seconds if spec.probe else None,
        sp.disk,
        eff.object_store_max_p99_seconds.value,
        block_tokens=sp.input.block_tokens,
        # Only the part of a prefix the CPU tier lacks comes from the disk tier, and a restore
        # moves the stored bytes of it (groups, windows and copies as vLLM lays them out).
        share=plan_share(sp),
        bytes_per_token=max(1, sp.sizing.context_bytes // sp.input.average_context_tokens),
        observed=observed_evidence(spec, facts),
    )
    if measured_prefill(spec, facts) is not None:
        verdict = replace(
            verdict, message=f"{verdict.message}; t_prefill measured from vLLM's metrics"
        )
    if verdict.beneficial is None and not verdict.degraded:
        return [
            Verdict(ConditionType.TIER_BENEFICIAL.value, UNKNOWN, verdict.reason, verdict.message)
        ]
    ok = bool(verdict.beneficial) and not verdict.degraded
    return [
        Verdict(
            ConditionType.TIER_BENEFICIAL.value,
            TRUE if ok else FALSE,
            verdict.reason,
            verdict.message,
        )
    ]


def drop_if_not_beneficial(sp: SizingPlan, eff: EffectiveSettings) -> Verdict | None:
    """With nonBeneficialTier: Drop, a measured tier that loses to recompute is left out."""
    if sp.disk is None or eff.non_beneficial_tier.value != NonBeneficialAction.DROP:
        return None
    chosen = next((t for t in sp.tiers if t.name == sp.disk), None)
    if chosen is None or chosen.beneficial is not False:
        return None
    return Verdict(
        ConditionType.TIER_BENEFICIAL.value,
        FALSE,
        "Dropped",
        f"{sp.disk} tier left out (KVCachePolicy nonBeneficialTier: Drop): {chosen.reason}",
    )
