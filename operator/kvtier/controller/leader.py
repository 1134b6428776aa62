"""Lease-based leader election: of several replicas, exactly one reconciles.

Every replica watches (so its cache is warm for a fast failover); only the holder of the
Lease works the queue. The holder renews every `renew` seconds; a replica takes over a Lease
whose renewTime is older than its duration. Updates carry the resourceVersion, so two
replicas racing for an expired Lease cannot both win.

As in client-go, the holder stops acting once `renew_deadline` has passed since the start of
its last successful renewal, whether or not the request it is waiting on ever answers: that
renewal's renewTime is later than its start, so no other replica can take the Lease before
renewTime + duration, which is after the deadline. Renewals run in a thread of their own with
a request timeout shorter than the deadline, so neither a queue of reconciles in the shared
thread pool nor a stalled API server can keep a replica acting on a Lease it may have lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier.kube.rest import Kube

log = logging.getLogger("kvtier.leader")
LEASE_API = "coordination.k8s.io/v1"
LEASE_NAME = "kvtier-operator"


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease_expired(lease: dict[str, Any], now: datetime) -> bool:
    spec = lease.get("spec") or {}
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    duration = int(spec.get("leaseDurationSeconds") or 0)
    return renewed is None or renewed + timedelta(seconds=duration) < now


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        duration: int = 15,
        renew_deadline: float = 10.0,
        renew: float = 5.0,
        retry: float = 1.0,
    ) -> None:
        if not retry <= renew < renew_deadline < duration:
            raise ValueError("leader election needs retry <= renew < renew_deadline < duration")
        # A request that hangs must end before the deadline, so the next round can run.
        self.kube = Kube(kube.api, timeout=renew_deadline / 2)
        self.namespace = namespace
        self.identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.duration = duration
        self.renew_deadline = renew_deadline
        self.renew = renew
        self.retry = retry
        self.leading = False
        self._renewed = 0.0  # monotonic start of the last successful round
        self._path = f"/apis/{LEASE_API}/namespaces/{namespace}/leases"

    def _body(self, acquire: datetime, transitions: int, rv: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": LEASE_NAME, "namespace": self.namespace}
        if rv:
            meta["resourceVersion"] = rv
        return {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration,
                "acquireTime": _stamp(acquire),
                "renewTime": _stamp(_now()),
                "leaseTransitions": transitions,
            },
        }

    def _try(self) -> bool:
        """One round: acquire, renew or observe. True when this replica holds the Lease."""
        try:
            lease = self.kube.request("GET", f"{self._path}/{LEASE_NAME}")
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.kube.request("POST", self._path, self._body(_now(), 0, None))
            return True
        spec = lease.get("spec") or {}
        rv = lease["metadata"]["resourceVersion"]
        transitions = int(spec.get("leaseTransitions") or 0)
        if spec.get("holderIdentity") == self.identity:
            acquired = _parse(spec.get("acquireTime")) or _now()
            body = self._body(acquired, transitions, rv)
        elif lease_expired(lease, _now()):
            body = self._body(_now(), transitions + 1, rv)
        else:
            return False
        self.kube.request("PUT", f"{self._path}/{LEASE_NAME}", body)
        return True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        pool = ThreadPoolExecutor(1, thread_name_prefix="kvtier-lease")
        try:
            while True:
                await asyncio.sleep(await self._round(loop, pool))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    async def _round(self, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor) -> float:
        """One try; returns how long to wait before the next."""
        started = time.monotonic()
        limit = self._renewed + self.renew_deadline - started if self.leading else self.renew
        holding: bool | None = None  # None: could not tell
        try:
            future = loop.run_in_executor(pool, self._try)
            holding = await asyncio.wait_for(future, max(limit, 0.0))
        except TimeoutError:
            log.warning("leader election: no answer within %.1fs", max(limit, 0.0))
        except ApiException as exc:
            if exc.status == 409:  # another replica won the race or took the Lease
                holding = False
            else:
                log.warning("leader election: %s", exc.status)
        except Exception as exc:  # the API server may be restarting: keep trying
            log.warning("leader election: %s", exc)
        if holding:
            self._renewed = started
        elif holding is None and self.leading:
            if time.monotonic() < self._renewed + self.renew_deadline:
                return self.retry  # still within the deadline: act on, try again soon
            log.warning("leader election: not renewed within %.0fs", self.renew_deadline)
        self._become(bool(holding))
        return self.renew

    def _become(self, holding: bool) -> None:
        if holding == self.leading:
            return
        self.leading = holding
        log.info("%s leadership (%s)", "acquired" if holding else "lost", self.identity)
        (self.on_started if holding else self.on_stopped)()

    def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a standby takes over at once."""
        if not self.leading:
            return
        try:
            lease = self.kube.request("GET", f"{self._path}/{LEASE_NAME}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["renewTime"] = _stamp(_now() - timedelta(days=1))
                lease["spec"]["holderIdentity"] = ""
                self.kube.request("PUT", f"{self._path}/{LEASE_NAME}", lease)
        except Exception as exc:  # best effort: the Lease expires by itself anyway
            log.warning("could not release the Lease: %s", exc)
