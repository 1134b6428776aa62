"""Pydantic models of the kvtier custom resources: the single source of the CRD schemas."""

from kvtier.api.common import Condition, ConditionStatus, quantity_bytes
from kvtier.api.policy import KVCachePolicy, KVCachePolicySpec
from kvtier.api.tier import KVCacheTier, KVCacheTierSpec, KVCacheTierStatus

__all__ = [
    "Condition",
    "ConditionStatus",
    "KVCachePolicy",
    "KVCachePolicySpec",
    "KVCacheTier",
    "KVCacheTierSpec",
    "KVCacheTierStatus",
    "quantity_bytes",
]
