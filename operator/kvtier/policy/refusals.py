"""Sized=False: the facts that stop sizing, told in the KVCacheTier spec's terms, and a plan
the API server could not store."""

from __future__ import annotations

from kvtier.api.tier import ConditionType
from kvtier.policy.conditions import FALSE, Verdict
from kvtier.sizing import SizingPlan

# SizingError.field → the KVCacheTier spec path it comes from.
SPEC_PATHS = {
    "tensorParallelSize": "spec.model.tensorParallelSize",
    "kvCacheDtype": "spec.model.kvCacheDtype",
    "kvHeads": "spec.model.geometry.kvHeads",
    "geometry": "spec.model.geometry",
    "blockTokens": "spec.model.blockSizeTokens",
    "cpu.size": "spec.cpu.size",
    "disk.type": "spec.disk.type",
    "baselineTTFTSeconds": "spec.probe.baselineTTFTSeconds",
    "model": "spec.model",
    "config.json": "spec.model.configMapRef",
    # The node's memory cannot hold one block of this model: the geometry or the CPU tier.
    "nodeMemoryBytes": "spec.model (one KV block exceeds what a node affords the CPU tier)",
    "blockSizeTokens": "spec.model.blockSizeTokens",
    "vllmVersion": "spec.model.vllmVersion",
    "gpuBlockSizeTokens": "the target's --block-size",
}
INT64_MAX = 2**63 - 1  # what the API server stores for an integer field


class Refusal(Exception):
    """A fact that stops sizing; becomes a condition, never a crash."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


def sized_false(reason: str, message: str) -> Refusal:
    return Refusal(Verdict(ConditionType.SIZED.value, FALSE, reason, message))


def beyond_int64(sp: SizingPlan) -> Verdict | None:
    """A plan whose byte counts the API server cannot store is refused before any write."""
    figures = {
        "spec.workload": sp.sizing.working_set_bytes_all_replicas,
        "spec.cpu.size": max(sp.sizing.cpu_bytes_to_use, sp.sizing.pod_memory_bytes),
    }
    for path, value in figures.items():
        if value > INT64_MAX:
            return Verdict(
                ConditionType.SIZED.value,
                FALSE,
                "TooLarge",
                f"{path}: the plan needs {value} bytes, more than any node or volume "
                f"holds (and beyond what Kubernetes stores, {INT64_MAX})",
            )
    return None
