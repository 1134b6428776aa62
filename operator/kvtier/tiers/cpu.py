"""The CPU tier every plan has: vLLM's OffloadingConnector keeps it in host memory (a file in
/dev/shm for the releases that share it between processes), sized by kvtier.sizing and
written into the model server by its target kind (memory, /dev/shm, the connector's config).

It provisions no object, is never probed (it is host memory) and needs no evictor: vLLM
evicts its own CPU blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierSpec
from kvtier.names.labels import TierRef
from kvtier.render.quantities import short_quantity
from kvtier.render.result import DesiredWrite
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingPlan
from kvtier.sizing.vllm import SHM_FILES
from kvtier.tiers.base import ProbeVolume, Provision, TierRequest


class CPU:
    name = "CPU"
    status_name = "cpu"
    vllm_type: str | None = None  # the connector's primary tier, not a secondary one
    shared = False
    evicted = False

    def available(
        self,
        spec: KVCacheTierSpec,
        settings: EffectiveSettings,
        nodes: Sequence[Mapping[str, Any]],
        eligible: Set[str],
    ) -> bool:
        return True

    def provision(self, request: TierRequest) -> Provision:
        """Nothing to create; a note when the release leaves its /dev/shm file behind."""
        sizing = request.sizing
        if not sizing.clear_stale_shm_file:
            return Provision()
        return Provision(
            notes=(
                f"vLLM {sizing.release.series} leaves {SHM_FILES} behind when a worker is "
                "killed: a postStart hook on the vLLM container removes it on every start, "
                "before vLLM maps its tier (a hook of the user's own is kept, and the file is "
                "then not removed)",
            )
        )

    def policy_writes(
        self, policy: KVCachePolicySpec | None, settings: EffectiveSettings
    ) -> list[DesiredWrite]:
        return []

    def probe_volume(
        self,
        request: TierRequest,
        writes: Sequence[DesiredWrite],
        disk_status: Mapping[str, Any],
    ) -> ProbeVolume | None:
        return None

    def evictor_pods(self, tier: TierRef, target: str, claim: str | None) -> str | None:
        return None

    def status_text(self, sizing: SizingPlan, settings: EffectiveSettings, capacity: object) -> str:
        return short_quantity(sizing.sizing.cpu_bytes_to_use)


CPU_TIER = CPU()
