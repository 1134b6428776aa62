"""PolicyCompliant: whether a KVCacheTier stays within KVCachePolicy 'cluster'."""

from __future__ import annotations

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import ConditionType, DiskType, KVCacheTierSpec
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.settings import EffectiveSettings


def policy_verdict(
    spec: KVCacheTierSpec,
    eff: EffectiveSettings,
    policy: KVCachePolicySpec | None,
    problems: list[tuple[str, str]],
) -> Verdict:
    problems = list(problems)
    wanted = spec.disk.nvme.pool if spec.disk and spec.disk.nvme else None
    if wanted and eff.nvme_pool is None:
        defined = sorted(p.name for p in (policy.nvme_pools or [])) if policy else []
        problems.append(
            (
                "UnknownNVMePool",
                f"spec.disk.nvme.pool: pool {wanted!r} is not defined in KVCachePolicy 'cluster' "
                f"(defined: {', '.join(defined) or 'none'})",
            )
        )
    if eff.disk_type.value == DiskType.OBJECT_STORE and not eff.object_store_allowed.value:
        problems.append(
            (
                "ObjectStoreNotAllowed",
                "spec.disk.type: ObjectStore tiers are not allowed by KVCachePolicy 'cluster' "
                "(objectStore.allowed is false): their p99 latency lands directly in TTFT",
            )
        )
    if not problems:
        return Verdict(
            ConditionType.POLICY_COMPLIANT.value, TRUE, "Compliant", "within KVCachePolicy limits"
        )
    reason = problems[0][0]
    return Verdict(
        ConditionType.POLICY_COMPLIANT.value, FALSE, reason, "; ".join(m for _, m in problems)
    )
