"""The observer reads a disk tier's evictor by direct scrape: for CephFS the claim's evictor
Deployment's pods (not the model server's), over a window of scrapes, from a real HTTP
server serving kvtier evict's own exposition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvtier.names.labels import TierRef
from kvtier.observe import disk
from kvtier.observe.runner import Observer
from kvtier.render.evictor import cephfs_evictor_name
from tests import evictor_exposition as ex
from tests.metrics_server import MetricsServer

CLAIM = "kv-cache-llama"
EVICTOR_POD = f"{cephfs_evictor_name(TierRef('llm', 'llama'), CLAIM)}-6d9c7b-x2k4q"


class Evictor:
    def __init__(self) -> None:
        self.usage = 0.92
        self.server = MetricsServer(lambda: ex.exposition(self.usage))
        self.port = self.server.port


@pytest.fixture
def evictor() -> Iterator[Evictor]:
    e = Evictor()
    yield e
    e.server.stop()


def pod(name: str, ip: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Running", "podIP": ip}}


def cephfs_tier(claim: str | None) -> dict[str, Any]:
    entry = {"name": "cephfs", **({"claimName": claim} if claim else {})}
    return {
        "metadata": {"name": "llama", "namespace": "llm"},
        "spec": {"targetRef": {"name": "llama"}},
        "status": {"sizing": {"blockBytes": 1}, "tiers": [{"name": "cpu"}, entry]},
    }


def test_a_cephfs_tier_is_read_from_its_evictor_deployment_over_a_window(
    evictor: Evictor,
) -> None:
    now = [1000.0]
    # The model server's pod is at an address nothing answers: scraping it would fail.
    pods = [pod("llama-predictor-0", "127.0.0.2"), pod(EVICTOR_POD, "127.0.0.1")]
    observer = Observer(lambda ns: pods, lambda key: None, lambda: now[0], evictor.port)
    observer.configure({"directScrape": {}, "windowSeconds": 60})
    first = observer.evaluate(("llm", "llama"), cephfs_tier(CLAIM))
    assert first is not None and first.disk is not None
    assert (first.disk.tier, first.disk.state.reason) == ("cephfs", disk.REASON_BRIEFLY_ABOVE)
    observer.results[("llm", "llama")] = first
    now[0] += 60
    second = observer.evaluate(("llm", "llama"), cephfs_tier(CLAIM))
    assert second is not None and second.disk is not None
    # Above at both ends of the window: True wanted once, to be confirmed.
    assert (second.disk.state.status, second.disk.state.pending_status) == ("False", "True")
    observer.results[("llm", "llama")] = second
    now[0] += 5
    third = observer.evaluate(("llm", "llama"), cephfs_tier(CLAIM))
    assert third is not None and third.disk is not None
    assert (third.disk.state.status, third.disk.state.reason) == ("True", disk.REASON_ABOVE)
    assert f"pod {EVICTOR_POD}" in third.disk.state.message
    assert third.disk.used_bytes == int(0.92 * ex.CAPACITY)
    assert third.state.reason == "MetricsUnavailable"  # vLLM's read failed on its own


def test_a_cephfs_tier_without_a_claim_or_evictor_is_unknown() -> None:
    observer = Observer(lambda ns: [], lambda key: None)
    observer.configure({"directScrape": {}})
    for claim, says in ((None, "no claim"), (CLAIM, "no running evictor pod")):
        result = observer.evaluate(("llm", "llama"), cephfs_tier(claim))
        assert result is not None and result.disk is not None
        assert result.disk.state.reason == disk.REASON_UNAVAILABLE
        assert says in result.disk.state.message
