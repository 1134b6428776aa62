"""The evictor each disk tier gets, from the tier's effective settings.

render/evictor.py builds the containers; this module picks their settings (the policy's
watermarks, the tier's capacity, the model's block size) and turns the CephFS Deployment
into a write. The NVMe sidecar travels in `Offload.evictor` into the target's own writes
(targets/pod.py), since it lives in the model server's pod.
"""

from __future__ import annotations

from kvtier.render.evictor import EvictorSettings, cephfs_evictor_deployment
from kvtier.render.labels import TierRef
from kvtier.render.quantities import to_quantity
from kvtier.render.result import DesiredWrite
from kvtier.settings import EffectiveSettings


def evictor_settings(
    settings: EffectiveSettings, image: str, capacity_bytes: int, block_bytes: int
) -> EvictorSettings:
    """The evictor of one disk tier: bounded by the tier's capacity, the policy's watermarks,
    protection age and interval, in the operator's own image (it ships `kvtier evict`)."""
    return EvictorSettings(
        image=image,
        capacity_bytes=capacity_bytes,
        block_bytes=block_bytes,
        high=settings.eviction_high_watermark.value,
        low=settings.eviction_low_watermark.value,
        protect_seconds=settings.eviction_protect_seconds.value,
        interval_seconds=settings.eviction_interval_seconds.value,
    )


def cephfs_evictor_write(tier: TierRef, claim_name: str, evictor: EvictorSettings) -> DesiredWrite:
    """The Deployment that evicts the tier's shared CephFS claim (one for all replicas)."""
    body = cephfs_evictor_deployment(tier, claim_name, evictor)
    meta = body["metadata"]
    return DesiredWrite(
        "Apply",
        "apps/v1",
        "Deployment",
        meta["name"],
        meta["namespace"],
        body,
        f"Deployment {meta['namespace']}/{meta['name']}: kvtier evict on claim {claim_name} "
        f"(capacity {to_quantity(evictor.capacity_bytes)}, {evictor.high:g} → "
        f"{evictor.low:g}, files used in the last {evictor.protect_seconds} s kept)",
    )
