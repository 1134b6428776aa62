"""The whole decision for one KVCacheTier, from facts read off the cluster.

`decide(facts)` is pure: the operator reads the tier, the policy, the target, the model's
ConfigMap and the nodes, calls it, and writes what it returns. Plan and Apply mode share it,
so status.plan always describes exactly what Apply mode writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import ConditionType, DiskType, KVCacheTierSpec, Mode
from kvtier.policy.apply_step import apply_step
from kvtier.policy.atomic import atomic_verdict
from kvtier.policy.benefit import drop_if_not_beneficial, tier_beneficial
from kvtier.policy.claims import claimed_by
from kvtier.policy.compliance import nvme_pool_missing, policy_verdict
from kvtier.policy.conditions import FALSE, TRUE, Verdict, flipped, merge_conditions
from kvtier.policy.contract import Decision, Facts, Worked, meta
from kvtier.policy.events import Event, event_type, newsworthy
from kvtier.policy.kv_cache_dtype import kv_cache_dtype_flag, users_flags
from kvtier.policy.observed_health import disk_pressure, set_used_bytes, tier_effective
from kvtier.policy.parse_cache import Parsed, parse
from kvtier.policy.placement import Placement, placement
from kvtier.policy.plan_cache import planned
from kvtier.policy.probe_step import probe_step
from kvtier.policy.provisioning import split_writes
from kvtier.policy.ready import blocked, hold_back, ready_verdict, refusal
from kvtier.policy.refusals import SPEC_PATHS, Refusal, beyond_int64, sized_false
from kvtier.policy.roles import RolePlan, role_input, role_plans
from kvtier.policy.scheduler import configmap_step, referenced_configmap, scheduler_verdict
from kvtier.policy.sizing_input import (
    assumed_release,
    available_disks,
    context_beyond_max_model_len,
    sizing_input,
    with_measured_prefill,
)
from kvtier.policy.status_shape import (
    disk_tier_text,
    measured,
    plan_summary,
    short_quantity,
    status_tiers,
)
from kvtier.policy.target_found import not_found, target_facts_or_refusal
from kvtier.render import RenderError, RenderResult, TierRef
from kvtier.render.picker_version import picker_layout
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.render.writes import render_writes
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingError, SizingPlan, cpu_tier_cap, record
from kvtier.targets.facts import TargetFacts
from kvtier.tiers.base import TierRequest
from kvtier.tiers.nvme import binding_warning
from kvtier.tiers.registry import CPU, find_disk_tier, status_name


def decide(facts: Facts) -> Decision:
    """Conditions, sizing, tiers and plan for one KVCacheTier."""
    tier = facts.tier
    generation = meta(tier, "generation")
    previous = (tier.get("status") or {}).get("conditions") or []
    prev_tiers = (tier.get("status") or {}).get("tiers") or []
    parsed = parse(
        tier.get("spec") or {}, None if facts.policy is None else facts.policy.get("spec") or {}
    )
    spec, policy, eff = parsed.spec, parsed.policy, parsed.settings
    verdicts: list[Verdict] = []
    if parsed.policy_error is not None:
        verdicts.append(
            Verdict(
                ConditionType.POLICY_COMPLIANT.value,
                FALSE,
                "PolicyInvalid",
                f"KVCachePolicy 'cluster' is invalid; using built-in defaults: "
                f"{parsed.policy_error}",
            )
        )
    mode = eff.mode.value.value
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "mode": mode,  # the Mode column: spec.mode or the policy's default
        "effective": [dict(row) for row in parsed.effective],
    }
    decision = Decision(mode=mode, status=status, settings=eff)

    ref = spec.target_ref
    ns = meta(tier, "namespace")
    reuse = facts.worked
    if facts.target is None:
        verdicts.append(not_found(ref, ns, facts.target_versions))
        found: TargetFacts | Verdict | None = None
    else:
        # The target as read before this reconcile's writes when their answers add nothing
        # else (Worked): what is worked out from it is the same, and is not worked out again.
        basis = facts.target if reuse is None else reuse.basis
        found = reuse.found if reuse is not None else None
        if found is None:
            found = target_facts_or_refusal(basis, facts.related)
        decision.worked = Worked(basis, found)
    if isinstance(found, Verdict):
        verdicts.append(found)
    elif found is not None and decision.worked is not None:
        target = users_flags(found, decision.worked.basis)
        decision.target = target
        verdicts.append(
            Verdict(
                ConditionType.TARGET_FOUND.value,
                TRUE,
                "TargetFound",
                f"{target.kind} {ns}/{ref.name} ({target.api_version}), "
                f"{target.replicas} replica(s)",
            )
        )
        verdicts.extend(_size(decision, spec, parsed, target, facts, policy))
        claimed = claimed_by(facts, mode)
        if claimed is not None:
            verdicts.append(
                Verdict(
                    ConditionType.CONFLICT.value,
                    TRUE,
                    "TargetClaimed",
                    f"{target.kind} {ns}/{ref.name} is already configured by KVCacheTier "
                    f"{claimed}: one tier per model server (the oldest applies; this one waits)",
                )
            )
    if not any(v.type == ConditionType.POLICY_COMPLIANT.value for v in verdicts):
        verdicts.append(policy_verdict(spec, eff, policy, decision.policy_problems))
    refused = refusal(verdicts)
    if refused is not None:
        # Never act on a plan that failed a check: nothing half-applied, nothing probed; and
        # the steps held back say so instead of waiting for writes that are never made.
        decision.writes = []
        decision.probe = None
        verdicts = hold_back(verdicts)
        plan_status = status.get("plan")
        if mode == Mode.APPLY and isinstance(plan_status, dict) and "summary" in plan_status:
            plan_status["summary"] += (
                f"\nNot applied: {refused.type} is {refused.status} ({refused.reason})"
            )
    verdicts.append(ready_verdict(verdicts, mode))
    # After Ready: whether a tier pays off never blocks it.
    effective = tier_effective(facts, policy)
    if effective is not None:
        verdicts.append(effective[0])
        status["observed"] = effective[1]
    disk_tier = status_name(decision.sizing.disk) if decision.sizing else None
    pressure = disk_pressure(facts, policy, disk_tier)
    if pressure is not None:
        verdicts.append(pressure[0])
    status["conditions"] = merge_conditions(previous, verdicts, generation, facts.now)
    decision.events = [
        Event(event_type(v), v.reason, v.message)
        for v in verdicts
        if flipped(previous, v) and newsworthy(previous, v)
    ]
    status["tiers"] = (
        status_tiers(
            decision.sizing,
            prev_tiers,
            decision.disk_status,
            decision.applied,
            decision.probe.result if decision.probe else None,
        )
        if decision.sizing
        else None
    )
    if pressure is not None and status["tiers"]:
        set_used_bytes(status["tiers"], prev_tiers, str(disk_tier), pressure[1])
    return decision


def _size(
    decision: Decision,
    spec: KVCacheTierSpec,
    parsed: Parsed,
    target: TargetFacts,
    facts: Facts,
    policy: KVCachePolicySpec | None,
) -> list[Verdict]:
    eff, rows = parsed.for_image_version(target.server.image_vllm_version)
    if eff is not parsed.settings:  # the target's image names its vLLM: status.effective says so
        decision.status["effective"] = [dict(row) for row in rows]
    gpus = target.gpus_per_pod or target.tensor_parallel_size or 0
    place = placement(facts.nodes, target.node_selector, gpus)
    available = available_disks(spec, eff, facts.nodes, place)
    try:
        if eff.disk_type.value == DiskType.NVME and eff.nvme_pool is None:
            # Not "NVMe is not available here": the pool asked for, or the policy, is missing.
            wanted = spec.disk.nvme.pool if spec.disk and spec.disk.nvme else None
            invalid = facts.policy is not None and policy is None
            raise sized_false("NVMePoolNotFound", nvme_pool_missing(wanted, policy, invalid))
        probes = measured((facts.tier.get("status") or {}).get("tiers") or [])
        base = with_measured_prefill(
            sizing_input(spec, eff, target, place, facts.config_map, available, probes),
            spec,
            facts,
        )
        decode = next((r for r in target.roles if r.role == "decode"), None)
        inp = role_input(base, decode) if decode is not None else base
        too_long = context_beyond_max_model_len(inp)
        if too_long is not None:
            return [too_long]
        sp = planned(inp)
        too_large = beyond_int64(sp)
        if too_large is not None:
            return [too_large]
        cap = cpu_tier_cap(inp)
        if inp.cpu_bytes is not None and cap is not None and inp.cpu_bytes > cap:
            decision.policy_problems.append(
                (
                    "CPUTierAboveLimit",
                    f"spec.cpu.size: {short_quantity(inp.cpu_bytes)} is more than a model-server "
                    f"pod may take here, {short_quantity(cap)} (memory.maxNodeFraction "
                    f"{inp.max_node_memory_fraction} of "
                    f"{short_quantity(inp.node_memory_bytes or 0)} node memory over "
                    f"{inp.model_server_pods_per_node} pod(s), less headroom, "
                    f"over overhead {inp.memory_overhead_factor})",
                )
            )
        dropped = drop_if_not_beneficial(sp, eff)
        if dropped is not None:
            sp = planned(record.replace(inp, disk_type="None"))
        roles = role_plans(base, sp, target.roles, facts.nodes)
    except Refusal as refusal:
        return [refusal.verdict]
    except SizingError as exc:
        return [
            Verdict(
                ConditionType.SIZED.value,
                FALSE,
                "SizingFailed",
                f"{SPEC_PATHS.get(exc.field, exc.field)}: {exc.message}",
            )
        ]
    decision.sizing = sp
    status = decision.status
    render_verdicts = _render(decision, spec, eff, sp, target, facts, place, roles)
    if dropped is not None:
        render_verdicts.append(dropped)
    status["sizing"] = sp.to_status()["sizing"]
    status["cpuTier"] = CPU.status_text(sp, eff, None)
    status["diskTier"] = disk_tier_text(sp, eff, decision.disk_status.get("capacityQuantity"))
    fits = "fits" if sp.sizing.fits_in_cpu else "does not fit"
    where = (
        f"on {len(place.eligible_nodes)} eligible node(s)"
        if place.eligible_nodes
        else "no eligible GPU node seen"
    )
    return [
        Verdict(
            ConditionType.SIZED.value,
            TRUE,
            "Sized",
            f"{sp.sizing.topology}: working set {short_quantity(sp.sizing.working_set_bytes)} "
            f"{fits} the CPU tier {short_quantity(sp.sizing.cpu_bytes_to_use)} "
            f"({sp.sizing.bytes_per_token} B/token, {where}){assumed_release(eff)}",
        ),
        *render_verdicts,
    ]


def _render(
    decision: Decision,
    spec: KVCacheTierSpec,
    eff: EffectiveSettings,
    sp: SizingPlan,
    target: TargetFacts,
    facts: Facts,
    place: Placement,
    roles: Sequence[RolePlan] = (),
) -> list[Verdict]:
    """The writes Apply mode makes (Plan mode reports them) and what the cluster shows."""
    tier_meta = facts.tier.get("metadata") or {}
    ref = TierRef(str(tier_meta.get("namespace")), str(tier_meta.get("name")), tier_meta.get("uid"))
    worked, reuse = decision.worked, facts.worked
    assert worked is not None
    basis = worked.basis  # the target rendered from (judged below as facts.target holds it)
    summary = plan_summary(sp, decision.mode)
    scheduler_configmap = referenced_configmap(basis, facts.scheduler_configmaps)
    rendered = reuse.render if reuse is not None else None
    if rendered is None:
        try:
            rendered = render_writes(
                ref,
                spec,
                eff,
                sp,
                basis,
                facts.nodes,
                target.replicas,
                [r.offload() for r in roles],
                evictor_image=facts.probe_image,
                kv_cache_dtype_flag=kv_cache_dtype_flag(eff, target.server),
                scheduler_configmap=scheduler_configmap,
                picker_layout=(
                    None
                    if facts.llmisvc_configs is None
                    else picker_layout(basis, facts.llmisvc_configs, facts.kserve_namespace)
                ),
                related=facts.related,
            )
        except RenderError as exc:
            rendered = exc
    worked.render = result = rendered
    if isinstance(result, RenderError):
        decision.status["plan"] = {"summary": f"{summary}\nCannot apply: {result.message}"}
        return [Verdict(result.condition, FALSE, result.reason, result.message)]
    if result.conflict is not None:
        decision.status["plan"] = {"summary": f"{summary}\n{result.summary}"}
        conflict = Verdict(
            ConditionType.CONFLICT.value, TRUE, "KVTransferConfigInUse", result.conflict
        )
        # Plan mode has no Applied; Apply mode's says why nothing is applied.
        if decision.mode != Mode.APPLY:
            return [conflict]
        return [conflict, blocked(ConditionType.APPLIED, conflict)]
    if reuse is not None and reuse.atomic_checked:
        atomic = reuse.atomic
    else:
        atomic = atomic_verdict(facts.target_schemas, result.writes, basis)
    worked.atomic, worked.atomic_checked = atomic, True
    if atomic is not None:
        decision.status["plan"] = {"summary": f"{summary}\nCannot apply: {atomic.message}"}
        return [atomic]
    tier_writes, policy_writes = split_writes(result.writes)
    scheduler, tier_writes = configmap_step(
        result.scheduler,
        tier_writes,
        facts.scheduler_configmaps,
        ref.id,
        ref.namespace,
        facts.scheduler_forbidden,
        [r.offload() for r in roles],
    )
    notes = [
        *result.notes,
        *(f"the KVCachePolicy provides {w.kind} {w.name}" for w in policy_writes),
    ]
    if any(r.facts.role == "prefill" for r in roles):
        notes.append("prefill has a CPU tier of its own; the disk tier serves decode")
    class_pool = eff.nvme_pool if sp.disk == "NVMe" else None
    class_name = class_pool.storage_class_name if class_pool else None
    storage_class = facts.storage_classes.get(class_name) if class_name else None
    warning = binding_warning(storage_class) if storage_class else None
    if warning:
        notes.append(f"warning: {warning}")
    if isinstance(scheduler, SchedulerProblem):
        notes.append(scheduler.message)
    plan_status = RenderResult(writes=tier_writes, notes=notes).plan_status()
    plan_status["summary"] = f"{summary}\n{plan_status['summary']}"
    if roles:
        plan_status["roles"] = [r.status() for r in roles]
    synced = scheduler_verdict(scheduler, basis, scheduler_configmap)
    if isinstance(scheduler, SchedulerSync):
        plan_status["scheduler"] = scheduler.status()
    decision.status["plan"] = plan_status
    decision.desired = tier_writes
    if decision.mode != Mode.APPLY:
        return []
    provisioned, applied = apply_step(
        decision, spec, sp, target, facts, place, ref, tier_writes, class_pool, storage_class
    )
    verdicts = [provisioned, applied]
    if synced is not None:
        verdicts.append(synced)
    disk = find_disk_tier(sp.disk)
    if disk is not None and eff.probe_enabled.value:
        request = TierRequest(ref, spec, eff, sp, facts.nodes, target.replicas, facts.probe_image)
        volume = disk.probe_volume(request, tier_writes, decision.disk_status)
        if volume is not None:  # fio measures a volume: a bucket has none
            decision.probe = probe_step(ref, disk, volume, eff, sp, provisioned.ok, facts)
            if decision.probe.verdict is not None:
                verdicts.append(decision.probe.verdict)
    verdicts.extend(tier_beneficial(sp, spec, eff, decision, facts))
    return verdicts
