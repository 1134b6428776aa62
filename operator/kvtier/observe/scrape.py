"""Direct scrapes of a target's pods, where no Prometheus exists: GET each pod's /metrics and
read it with prometheus_client's text parser. Errors are values, as for the API client.

A scrape is one instant; the caller keeps earlier snapshots (History) to form a window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import urllib3

from kvtier.observe.prometheus import QueryError
from kvtier.observe.series import READ, Snapshot, merge, parse_exposition


@dataclass(frozen=True)
class PodEndpoint:
    pod: str
    url: str  # http://<pod IP>:<port>/metrics


def scrape(
    endpoints: Sequence[PodEndpoint],
    timeout_seconds: float = 5.0,
    at: float | None = None,
    names: Sequence[str] = READ,
) -> Snapshot | QueryError:
    """One snapshot over all pods; any pod that cannot be read fails the whole read, so
    a window never compares different sets of pods."""
    when = time.time() if at is None else at
    http = urllib3.PoolManager(timeout=urllib3.Timeout(total=timeout_seconds), retries=False)
    snaps = []
    try:
        for ep in endpoints:
            try:
                resp = http.request("GET", ep.url, headers={"Accept": "text/plain"})
            except urllib3.exceptions.HTTPError as exc:
                return QueryError("Unreachable", f"pod {ep.pod}: {type(exc).__name__}"[:300])
            if resp.status != 200:
                return QueryError("HTTPError", f"pod {ep.pod}: {ep.url} answered {resp.status}")
            try:
                snaps.append(parse_exposition(resp.data.decode("utf-8"), ep.pod, when, names))
            except (ValueError, UnicodeDecodeError) as exc:
                return QueryError("BadAnswer", f"pod {ep.pod}: not Prometheus text: {exc}"[:300])
    finally:
        http.clear()
    return merge(snaps, when)


class History:
    """Recent snapshots of one target, enough to find one a window back."""

    def __init__(self, keep: int = 64) -> None:
        self._snaps: deque[Snapshot] = deque(maxlen=keep)

    def add(self, snap: Snapshot) -> None:
        self._snaps.append(snap)

    def baseline(self, now: float, window_seconds: float) -> Snapshot | None:
        """The newest snapshot at least a window old; None until one is."""
        older = [s for s in self._snaps if now - s.at >= window_seconds]
        while len(self._snaps) > 1 and now - self._snaps[1].at >= window_seconds:
            self._snaps.popleft()  # older than needed: the next one is old enough
        return older[-1] if older else None
