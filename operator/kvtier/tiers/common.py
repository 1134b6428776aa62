"""What the tier types share: the settings of the evictor each disk tier gets.

render/evictor.py builds the evictor's containers; the tier types pick their settings (the
policy's watermarks, the tier's capacity, the model's block size) here. A shared claim's
evictor is a Deployment of the tier's own writes (cephfs.py); a per-pod one is a native
sidecar that travels in Provision.sidecar into the target's writes (targets/pod.py), since it
lives in the model server's pod.
"""

from __future__ import annotations

from kvtier.render.evictor import EvictorSettings
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
