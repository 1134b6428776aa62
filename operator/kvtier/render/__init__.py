"""Pure builders of every object and patch kvtier writes (no kube client, no I/O).

`render.writes.render_writes` is the entry point; Apply mode applies its writes in order and
Plan mode reports them in status.plan. The writes on a target itself come from its kind's
module under kvtier/targets/, which imports the builders here it needs: this module imports
only what imports no target module.
"""

from kvtier.names.labels import TierRef
from kvtier.render.result import DesiredWrite, RenderError, RenderResult

__all__ = [
    "DesiredWrite",
    "RenderError",
    "RenderResult",
    "TierRef",
]
