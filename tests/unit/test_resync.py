"""The periodic resync: every tier (and the policy) is queued again each period while the
replica leads, and not while it stands by; the period is `kvtier operator --resync-seconds`."""

from __future__ import annotations

import argparse
import asyncio

import pytest
from kubernetes import client

from kvtier import metrics
from kvtier.cli import build_parser, main
from kvtier.controller.cache import TierKey
from kvtier.controller.controller import Controller
from kvtier.controller.policy_reconciler import POLICY_KEY
from kvtier.controller.resync import ENV_RESYNC_SECONDS, RESYNC_SECONDS
from kvtier.kube.rest import Kube

TIERS = [("a", "one"), ("b", "two")]


def _queued_over(seconds: float, leading: bool, period: float = 0.05) -> tuple[list[TierKey], int]:
    """What the resync queued within `seconds`, and how many passes it counted."""

    async def run() -> tuple[list[TierKey], int]:
        controller = Controller(Kube(client.ApiClient()), resync_seconds=period)
        for namespace, name in TIERS:
            controller.cache.set_tier(
                (namespace, name), {"metadata": {"namespace": namespace, "name": name}}
            )
        if leading:
            controller.leading.set()
        before = metrics.RESYNCS._value.get()
        task = asyncio.create_task(controller._resync())
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        queued: list[TierKey] = []
        while len(controller.queue):
            queued.append(await controller.queue.get())
        return queued, int(metrics.RESYNCS._value.get() - before)

    return asyncio.run(run())


def test_a_leader_queues_every_tier_and_the_policy_each_period() -> None:
    queued, passes = _queued_over(0.18, leading=True)
    assert sorted(map(str, queued)) == sorted(map(str, [POLICY_KEY, *TIERS]))  # merged
    assert passes >= 2


def test_nothing_before_the_first_period() -> None:
    assert _queued_over(0.02, leading=True, period=1.0) == ([], 0)


def test_a_standby_queues_nothing() -> None:
    assert _queued_over(0.18, leading=False) == ([], 0)


def test_the_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="resync period"):
        Controller(Kube(client.ApiClient()), resync_seconds=0)


def _operator_args(*argv: str) -> argparse.Namespace:
    return build_parser("operator").parse_args(["operator", *argv])


def test_the_flag_sets_the_period(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_RESYNC_SECONDS, raising=False)
    assert _operator_args().resync_seconds == RESYNC_SECONDS
    assert _operator_args("--resync-seconds", "5").resync_seconds == 5.0


def test_a_bad_period_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_RESYNC_SECONDS, raising=False)
    assert main(["operator", "--resync-seconds", "0"]) == 2
    err = capsys.readouterr().err
    assert "argument --resync-seconds: must be more than zero seconds, got 0" in err
    monkeypatch.setenv(ENV_RESYNC_SECONDS, "soon")  # the environment's default is checked too
    assert main(["operator"]) == 2
    assert "argument --resync-seconds" in capsys.readouterr().err
