"""PolicyCompliant: whether a KVCacheTier stays within KVCachePolicy 'cluster'."""

from __future__ import annotations

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import ConditionType, DiskType, KVCacheTierSpec
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.settings import EffectiveSettings

# Where a platform team learns to declare the policy: the API server's own field docs.
HOW_TO_CREATE = (
    "the platform team creates it with spec.nvmePools "
    "(kubectl explain kvcachepolicy.spec.nvmePools)"
)


def nvme_pool_missing(
    wanted: str | None, policy: KVCachePolicySpec | None, invalid: bool = False
) -> str:
    """Why an NVMe tier has no pool, naming the pool asked for and those the policy defines:
    `policy` None is no KVCachePolicy at all, or with `invalid` one that does not validate."""
    asked = f"pool {wanted!r} is not defined" if wanted else "an NVMe tier needs a pool"
    if policy is None and invalid:
        return (
            f"spec.disk.nvme.pool: {asked}: KVCachePolicy 'cluster' is invalid, so it defines "
            "no NVMe pool (see PolicyCompliant)"
        )
    if policy is None:
        return (
            f"spec.disk.nvme.pool: {asked}: there is no KVCachePolicy 'cluster', which defines "
            f"the NVMe pools; {HOW_TO_CREATE}"
        )
    defined = ", ".join(sorted(p.name for p in policy.nvme_pools or [])) or "none"
    where = "in" if wanted else "of"
    return f"spec.disk.nvme.pool: {asked} {where} KVCachePolicy 'cluster' (defined: {defined})"


def policy_verdict(
    spec: KVCacheTierSpec,
    eff: EffectiveSettings,
    policy: KVCachePolicySpec | None,
    problems: list[tuple[str, str]],
) -> Verdict:
    problems = list(problems)
    wanted = spec.disk.nvme.pool if spec.disk and spec.disk.nvme else None
    if wanted and eff.nvme_pool is None:
        problems.append(("UnknownNVMePool", nvme_pool_missing(wanted, policy)))
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
