"""The bare-write floor: the minimum API writes per tier, from a bare Python script.

Reads a JSON plan written by bench/convergence.py, ``{"workers": 4, "tiers": [[write, ...],
...]}``, where each write is ``{"op": "apply", "body": {...}}`` (server-side apply with
kvtier's field manager) or ``{"op": "status", "namespace", "name", "status"}`` (merge patch of
the status subresource). Each tier's writes run in order; ``workers`` tiers run at once, as the
operator's workers do. It goes through the same REST layer as the operator (kvtier.kube.rest),
so the difference to the operator is everything except the HTTP requests themselves.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kvtier.kube.rest import Kube, load_client


def perform(kube: Kube, writes: list[dict[str, Any]]) -> int:
    for w in writes:
        if w["op"] == "apply":
            kube.apply(w["body"])
        elif w["op"] == "status":
            kube.patch_status(
                "kvcache.io/v1alpha1",
                "KVCacheTier",
                w["name"],
                w["namespace"],
                w["status"],
                None,
            )
        else:
            raise ValueError(f"unknown write {w['op']!r}")
    return len(writes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--plan", type=Path, required=True)
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text())
    kube = Kube(load_client(args.kubeconfig))
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=int(plan["workers"])) as pool:
        done = sum(pool.map(lambda tier: perform(kube, tier), plan["tiers"]))
    print(f"floor: {done} writes in {time.monotonic() - started:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
