"""The observer's reading of a tier as the policy reads it: plain records, produced by
kvtier.observe (which judges vLLM's and the evictors' metrics) and consumed by kvtier.policy
(which turns them into conditions and status). They live here, below both, so neither layer
imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]
TPrefillSource = Literal["Baseline", "Measured"]


@dataclass(frozen=True)
class TPrefill:
    """Prefill seconds per token, and where it came from: the typed baseline TTFT over the
    average context, or measured (prefill time over tokens computed locally)."""

    seconds_per_token: float
    source: TPrefillSource

    def ttft_at(self, context_tokens: int) -> float:
        """The TTFT with offload off that this t_prefill implies at a context length."""
        return self.seconds_per_token * context_tokens


@dataclass(frozen=True)
class EffectiveState:
    """The verdict in force, and the one waiting for confirmation (kept in status)."""

    status: Status
    reason: str
    message: str
    pending_status: Status | None = None
    pending_count: int = 0


@dataclass(frozen=True)
class DiskObservation:
    """The DiskPressure state in force and the figures for status.tiers[]."""

    tier: str  # the status.tiers[] name: nvme or cephfs
    state: EffectiveState
    used_bytes: int | None = None
    capacity_bytes: int | None = None


@dataclass(frozen=True)
class Observation:
    """The result of one evaluation: what to write, and the t_prefill the gate may use."""

    state: EffectiveState
    observed: dict[str, Any] | None  # status.observed; None keeps the figures last written
    t_prefill: TPrefill | None = None
    disk: DiskObservation | None = None  # DiskPressure, for a tier with a disk tier
