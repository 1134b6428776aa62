"""`kvtier evict`: keep one vLLM fs tier directory below its high watermark.

vLLM's fs secondary tier never deletes a block, so the disk fills until writes fail. A pass
(run.run_pass) deletes the least recently used block files (layout.py) once the volume or the
tier's capacity reaches the high watermark, down to the low one (policy.py), never a file
used within the protection age, never anything outside the directory (scan.py, remove.py),
with one evictor acting per directory however many run (lock.py).
"""

from kvtier.evict.errors import BadDirectory, EvictError
from kvtier.evict.lock import LOCK_NAME, EvictorLock
from kvtier.evict.policy import Bound, Watermarks
from kvtier.evict.run import DEFAULT_INTERVAL_SECONDS, Options, PassResult, run_loop, run_pass
from kvtier.evict.tier_dir import TierDir, open_tier_dir

__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "LOCK_NAME",
    "BadDirectory",
    "Bound",
    "EvictError",
    "EvictorLock",
    "Options",
    "PassResult",
    "TierDir",
    "Watermarks",
    "open_tier_dir",
    "run_loop",
    "run_pass",
]
