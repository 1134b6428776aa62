"""The observer's settings and its direct-scrape path over real HTTP (a local server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvtier.observe.runner import CA_FILES, Observer, pod_endpoints, settings
from kvtier.observe.verdict import Thresholds
from tests import vllm_exposition as vx
from tests.metrics_server import MetricsServer


def test_settings_fill_in_the_built_in_defaults() -> None:
    assert settings(None) is None
    assert settings({"prometheus": {"url": "thanos:9091"}}) is None  # invalid: the policy says so
    st = settings({"prometheus": {"url": "https://thanos-querier.openshift-monitoring.svc:9091"}})
    assert st is not None and st.prometheus is not None
    assert (st.window, st.interval, st.thresholds) == (300, 60, Thresholds())
    assert st.prometheus.token_file is not None and st.prometheus.token_file.endswith("/token")
    assert st.prometheus.ca_file == CA_FILES["ServiceCA"]
    plain = settings(
        {
            "prometheus": {"url": "http://prometheus:9090", "serviceAccountToken": False},
            "windowSeconds": 20,
            "thresholds": {"confirmations": 3},
        }
    )
    assert plain is not None and plain.prometheus is not None
    assert (plain.prometheus.token_file, plain.prometheus.ca_file) == (None, None)
    assert (plain.interval, plain.thresholds.confirmations) == (10, 3)


def pod(name: str, phase: str = "Running", ip: str | None = "127.0.0.1") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase, "podIP": ip}}


def test_only_the_targets_running_pods_are_scraped() -> None:
    pods = [
        pod("llama-0"),
        pod("llama-1", phase="Pending"),
        pod("other-0"),
        pod("llama-2", ip=None),
    ]
    eps = pod_endpoints(pods, "llama-", 8000, "/metrics")
    assert [(e.pod, e.url) for e in eps] == [("llama-0", "http://127.0.0.1:8000/metrics")]


class Server:
    def __init__(self) -> None:
        self.seconds = 600.0
        self.scenario = "hit"
        self.server = MetricsServer(self.exposition)
        self.port = self.server.port

    def exposition(self) -> bytes:
        traffic = vx.SCENARIOS[self.scenario]
        return vx.render("0.24.0", "cpu", vx.totals(traffic, self.seconds))


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.server.stop()


def test_direct_scrapes_form_a_window_from_earlier_scrapes(server: Server) -> None:
    now = [1000.0]
    observer = Observer(
        lambda ns: [pod("llama-predictor-0")], lambda key: None, clock=lambda: now[0]
    )
    observer.configure({"directScrape": {"port": server.port}, "windowSeconds": 60})
    tier = {
        "metadata": {"name": "llama", "namespace": "llm"},
        "spec": {"targetRef": {"name": "llama"}, "workload": {"averageContextTokens": 50000}},
        "status": {"sizing": {"blockBytes": vx.BLOCK_BYTES}},
    }
    first = observer.evaluate(("llm", "llama"), tier)
    assert first is not None and first.state.reason == "WindowFilling"
    now[0] += 60
    server.seconds += 60
    second = observer.evaluate(("llm", "llama"), tier)
    assert second is not None and (second.state.status, second.state.reason) == (
        "True",
        "ServesHits",
    )
    assert second.observed is not None and second.observed["source"] == "DirectScrape"
    assert second.observed["windowSeconds"] == 60


def test_a_read_that_fails_is_a_verdict_not_an_exception() -> None:
    observer = Observer(lambda ns: [], lambda key: None)
    observer.configure({"directScrape": {}})
    tier = {
        "metadata": {"name": "llama", "namespace": "llm"},
        "spec": {"targetRef": {"name": "llama"}},
        "status": {"sizing": {"blockBytes": 1}},
    }
    result = observer.evaluate(("llm", "llama"), tier)
    assert result is not None and result.state.reason == "MetricsUnavailable"
    assert "no running pod of llama" in result.state.message

    def broken(ns: str) -> list[dict[str, Any]]:
        raise RuntimeError("API down")

    crashing = Observer(broken, lambda key: None)
    crashing.configure({"directScrape": {}})
    result = crashing.evaluate(("llm", "llama"), tier)
    assert result is not None and "API down" in result.state.message
