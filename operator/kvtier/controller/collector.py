"""How the operator's process uses Python's cycle collector.

The operator's heap is mostly decoded API objects (the cache, the watches' events, the
writes' answers): plain dicts and lists, freed by reference counting as they are replaced,
never in reference cycles. With the collector's default thresholds, every 700 new containers
started a collection, and each growth of the heap by a quarter a scan of all of it: while
500 tiers converged, 660 young and 6 full collections, about 9 % of the operator's CPU
(docs/performance.md). Fewer, larger young collections, and no full scans of what the
imports built or the first LISTs filled, take most of that away; cycles (asyncio's tasks
and tracebacks) are still collected, a little later.
"""

from __future__ import annotations

import gc

# Containers allocated (net) before a young collection; the older generations keep their
# default ratios.
YOUNG_THRESHOLD = 10_000


def tune() -> None:
    """At start, once the modules are imported: what exists now is never scanned again."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def settled() -> None:
    """Once the watches have delivered what exists: the cache's first objects are kept out
    of later full scans (they are still freed when replaced)."""
    gc.collect(1)  # the young garbage first: frozen, it would never be collected
    gc.freeze()
