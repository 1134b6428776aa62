"""Pure builders of every object and patch kvtier writes (no kube client, no I/O).

`render_writes` is the entry point; Apply mode applies its writes in order and Plan mode
reports them in status.plan.
"""

from kvtier.render.labels import TierRef
from kvtier.render.result import DesiredWrite, RenderError, RenderResult
from kvtier.render.targets import Conflict, Offload, target_patch, unapply_writes
from kvtier.render.writes import prune_writes, render_writes

__all__ = [
    "Conflict",
    "DesiredWrite",
    "Offload",
    "RenderError",
    "RenderResult",
    "TierRef",
    "prune_writes",
    "render_writes",
    "target_patch",
    "unapply_writes",
]
