"""The bare-write floors: the minimum API writes per tier, from a bare Python script.

Reads a JSON plan written by bench/convergence.py, ``{"workers": 4, "tiers": [[write, ...],
...], "watch": [...]}``, where each write is ``{"op": "apply", "body": {...}}`` (server-side
apply with kvtier's field manager), ``{"op": "status", "namespace", "name", "status"}`` (merge
patch of the status subresource) or ``{"op": "create", "body": {...}}`` (a POST, for Events).
Each tier's writes run in order; ``workers`` tiers run at once, as the operator's workers do.
It builds each request with the operator's request builders (kvtier.kube.rest), so the bodies
and paths are the operator's, and sends them with the official client from threads, as a
bare script would; the operator sends its own from its event loop (kvtier.kube.aio), which
costs less CPU per request: that difference is the operator's gain, not the floor's loss.

With ``watch`` (floor (c), the controller floor) it first LISTs each ``{"path",
"labelSelector"}`` and then holds a watch on it, decoding every event, in a thread of its own,
as any controller must to learn of the objects it reconciles; the writes start once every
LIST is in (a controller's cache sync). No framework, no decisions.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kvtier.kube.rest import Kube, load_client
from kvtier.kube.wire import decode


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
        elif w["op"] == "create":
            kube.create(w["body"])
        else:
            raise ValueError(f"unknown write {w['op']!r}")
    return len(writes)


def watch(kube: Kube, path: str, selector: str | None, listed: threading.Barrier) -> None:
    """LIST, then stream the watch from the LIST's version, decoding each event into a
    cache keyed by name (what an informer keeps)."""
    query = {"labelSelector": selector} if selector else {}
    out = kube.request("GET", path, query=query)
    cache = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in out["items"]}
    listed.wait()
    params = {
        **query,
        "watch": "true",
        "resourceVersion": out["metadata"]["resourceVersion"],
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "600",
    }
    for lines in kube.stream(path, params, read_timeout=660):
        for line in lines:
            event = decode(line)  # as the operator's informers do
            obj = event["object"]
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if event["type"] == "DELETED":
                cache.pop(key, None)
            elif event["type"] != "BOOKMARK":
                cache[key] = obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--plan", type=Path, required=True)
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text())
    kube = Kube(load_client(args.kubeconfig))
    started = time.monotonic()
    watches = plan.get("watch") or []
    listed = threading.Barrier(len(watches) + 1)
    for w in watches:
        threading.Thread(
            target=watch, args=(kube, w["path"], w.get("labelSelector"), listed), daemon=True
        ).start()
    if watches:
        listed.wait(timeout=60)
    with ThreadPoolExecutor(max_workers=int(plan["workers"])) as pool:
        done = sum(pool.map(lambda tier: perform(kube, tier), plan["tiers"]))
    print(f"floor: {done} writes in {time.monotonic() - started:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
