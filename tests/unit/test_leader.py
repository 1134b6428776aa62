"""Leader election's renew deadline: a leader whose renewals stop answering stops acting
before its Lease can pass to another replica, and keeps acting through a short stall."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.controller.leader import LeaderElector
from kvtier.kube.rest import Kube


class Scripted(LeaderElector):
    """An elector whose rounds answer as the test says: True/False, an exception, or hang
    until released (a stalled API server)."""

    def __init__(self, **timing: float) -> None:
        self.events: list[str] = []
        super().__init__(
            Kube(client.ApiClient(client.Configuration())),
            "ns",
            on_started=lambda: self.events.append("started"),
            on_stopped=lambda: self.events.append("stopped"),
            **timing,  # type: ignore[arg-type]
        )
        self.answer: bool | BaseException = True
        self.stall = threading.Event()
        self.stall.set()

    def _try(self) -> bool:
        self.stall.wait()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


TIMING = {"duration": 0.8, "renew_deadline": 0.4, "renew": 0.05, "retry": 0.02}


def test_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="renew_deadline < duration"):
        Scripted(duration=5, renew_deadline=10, renew=1, retry=1)


def test_a_stalled_leader_stops_acting_within_its_deadline() -> None:
    elector = Scripted(**TIMING)

    async def main() -> tuple[float, float]:
        task = asyncio.create_task(elector.run())
        await asyncio.sleep(0.2)
        assert elector.leading and elector.events == ["started"]
        elector.stall.clear()  # the API server stops answering
        stalled = time.monotonic()
        while elector.leading and time.monotonic() - stalled < 3:
            await asyncio.sleep(0.01)
        stopped = time.monotonic()
        elector.stall.set()
        task.cancel()
        # From the start of the last renewal that answered: on a loaded machine a round may
        # start later than `renew` after the one before, so not from the stall.
        return stopped - elector._renewed, stopped - stalled

    since_renewed, since_stalled = asyncio.run(main())
    assert elector.events == ["started", "stopped"]
    # Stopped after the deadline (never earlier) and well before the Lease's duration.
    assert since_renewed >= TIMING["renew_deadline"], since_renewed
    assert since_stalled < TIMING["duration"], since_stalled


def test_a_short_outage_within_the_deadline_keeps_the_leader_acting() -> None:
    elector = Scripted(**TIMING)

    async def main() -> None:
        task = asyncio.create_task(elector.run())
        await asyncio.sleep(0.2)
        elector.answer = ApiException(status=503)  # errors for less than the deadline
        await asyncio.sleep(0.15)
        elector.answer = True
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(main())
    assert elector.leading and elector.events == ["started"]


def test_an_outage_past_the_deadline_stops_and_the_next_renewal_resumes() -> None:
    elector = Scripted(**TIMING)

    async def main() -> None:
        task = asyncio.create_task(elector.run())
        await asyncio.sleep(0.2)
        elector.answer = ApiException(status=503)
        await asyncio.sleep(0.7)
        assert not elector.leading
        elector.answer = True
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(main())
    assert elector.events == ["started", "stopped", "started"]


def test_a_conflict_means_another_replica_holds_the_lease() -> None:
    elector = Scripted(**TIMING)

    async def main() -> None:
        task = asyncio.create_task(elector.run())
        await asyncio.sleep(0.2)
        elector.answer = ApiException(status=409)  # taken: stop at once, no deadline
        await asyncio.sleep(0.15)
        task.cancel()

    asyncio.run(main())
    assert elector.events == ["started", "stopped"]
