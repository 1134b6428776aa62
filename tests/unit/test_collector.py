"""The operator's use of the cycle collector (controller/collector.py), in a process of its
own: the thresholds and frozen objects are the process's."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, json
from kvtier.controller import collector
before = gc.get_threshold()
collector.tune()
after_tune = gc.get_freeze_count()
cache = [{"metadata": {"name": str(i)}} for i in range(20000)]  # the first LISTs' objects
collector.settled()
print(json.dumps({"before": before, "threshold": gc.get_threshold(),
                  "frozen_at_start": after_tune, "frozen_settled": gc.get_freeze_count()}))
"""


def test_imports_and_the_first_objects_are_frozen_and_young_collections_are_rarer() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    from kvtier.controller.collector import YOUNG_THRESHOLD

    assert seen["threshold"] == [YOUNG_THRESHOLD, *seen["before"][1:]]
    assert seen["threshold"][0] > seen["before"][0]
    # What the imports built, then (at least) the 20,000 objects the watches filled (a dict
    # of strings alone is never tracked).
    assert seen["frozen_at_start"] > 1_000
    assert seen["frozen_settled"] >= seen["frozen_at_start"] + 20_000
