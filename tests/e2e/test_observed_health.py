"""Tier health observed from vLLM's metrics, end to end: a real Prometheus (built from its Go
module, hack/prometheus/build) scrapes a server that serves vLLM's own metric definitions
(tests/fixtures/vllm-metrics) with values from scripted traffic; the operator on the local
control plane reads it through the same client it uses on a cluster, and a tier's
status.observed, TierEffective and kvtier's own metrics follow each scenario."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kvtier.observe.prometheus import PrometheusClient, PrometheusSource
from kvtier.observe.queries import Selection
from kvtier.observe.series import Snapshot
from localcluster import LocalCluster
from tests import vllm_exposition as vx
from tests.e2e.audit import OPERATOR_USER
from tests.e2e.conftest import create_target, llm_inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    condition,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.real_prometheus import running_prometheus
from tests.metrics_server import MetricsServer

REPO = Path(__file__).resolve().parents[2]
TARGET = "llama-70b"
POD = f"{TARGET}-kserve-0"
WINDOW = 15  # seconds: the figures' window
INTERVAL = 5  # seconds between evaluations of a tier
SCRAPE = 1  # Prometheus scrape interval
TP = 4  # the target's tensor parallelism: vLLM sums the transfer time of its 4 workers
# A scenario change shows after one full window, plus two agreeing evaluations, plus the
# scrape and the status write: within two windows.
WITHIN = 2 * WINDOW


class ScriptedServer:
    """Serves vLLM's exposition; counters integrate the current scenario's rates over time,
    so they only ever grow, as a running vLLM's do."""

    def __init__(self, version: str, config: str, workers: int) -> None:
        self.version, self.config, self.workers = version, config, workers
        self.scenario = "idle"
        self._lock = threading.Lock()
        self._since = time.monotonic()
        self._totals: dict[Any, Any] = {}
        self.server = MetricsServer(self.exposition)
        self.port = self.server.port

    def _advance(self) -> None:
        now = time.monotonic()
        traffic = replace(vx.SCENARIOS[self.scenario], workers=self.workers)
        step = vx.totals(traffic, now - self._since)
        for key, value in step.items():
            was = self._totals.get(key)
            if isinstance(value, tuple):
                old = was or (0.0, 0.0)
                self._totals[key] = (old[0] + value[0], old[1] + value[1])
            else:
                self._totals[key] = (was or 0.0) + value
        self._since = now

    def play(self, scenario: str) -> None:
        with self._lock:
            self._advance()
            self.scenario = scenario

    def exposition(self) -> bytes:
        with self._lock:
            self._advance()
            return vx.render(self.version, self.config, self._totals)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture(scope="module")
def vllm() -> Iterator[ScriptedServer]:
    server = ScriptedServer("0.33.0", "cpu+fs", workers=TP)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    return new_namespace(admin_api, "observed")


@pytest.fixture(scope="module")
def prometheus(
    vllm: ScriptedServer, ns: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    config = (
        f"global: {{scrape_interval: {SCRAPE}s, scrape_timeout: {SCRAPE}s}}\n"
        "scrape_configs:\n"
        "  - job_name: vllm\n"
        "    static_configs:\n"
        f'      - targets: ["127.0.0.1:{vllm.port}"]\n'
        f"        labels: {{namespace: {ns}, pod: {POD}}}\n"
    )
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), config) as url:
        yield url


def test_the_client_reads_vllm_series_through_the_real_prometheus(
    vllm: ScriptedServer, prometheus: str, ns: str
) -> None:
    vllm.play("hit")
    prom = PrometheusClient(PrometheusSource(prometheus))
    sel = Selection(ns, f"{TARGET}-")

    def scraped() -> Snapshot | None:
        snap = prom.counters(sel, time.time())
        return snap if isinstance(snap, Snapshot) and snap.values else None

    snap = eventually(scraped, 20, "vLLM series in Prometheus")
    names = {k.name for k in snap.values}
    assert {
        "vllm:prompt_tokens_by_source_total",
        "vllm:external_prefix_cache_hits_total",
        "vllm:kv_offload_load_time_total",
        "vllm:request_prefill_time_seconds_sum",
        "vllm:kv_offload_tiering_chunk_hits_total",
    } <= names
    assert {k.pod for k in snap.values} == {POD}
    tiers = {k.label("tier") for k in snap.values if k.name.endswith("chunk_hits_total")}
    assert tiers == {"0:primary", "1:fs"}
    other = prom.counters(Selection(ns, "someone-else-"), time.time())
    assert isinstance(other, Snapshot) and not other.values


def wide_column(table: str, name: str) -> str:
    """One column of the first row of `kubectl get -o wide` (columns align with the header)."""
    header, row = table.splitlines()[:2]
    return row[header.index(name) :].split()[0]


SCENARIOS = [
    ("hit", "True", "ServesHits"),
    ("useless", "False", "NoHits"),
    ("slow", "False", "RestoreSlowerThanRecompute"),
    ("idle", "Unknown", "LowTraffic"),
]


def test_a_tier_follows_each_scripted_scenario(
    admin_api: client.ApiClient,
    cluster: LocalCluster,
    operator: OperatorProcess,
    vllm: ScriptedServer,
    prometheus: str,
    ns: str,
) -> None:
    apply_policy(
        admin_api,
        {
            "metrics": {
                "prometheus": {"url": prometheus, "serviceAccountToken": False},
                "windowSeconds": WINDOW,
                "intervalSeconds": INTERVAL,
                "thresholds": {"minPromptTokens": 1000},
            }
        },
    )
    create_target(
        admin_api,
        ns,
        llm_inference_service(TARGET, tp=TP, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct"),
    )
    # No baseline TTFT is typed: the verdict uses the t_prefill measured from the window.
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Plan",
            "targetRef": {"kind": "LLMInferenceService", "name": TARGET},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
            "model": {"blockSizeTokens": vx.BLOCK_TOKENS},
        },
    )
    try:
        for scenario, status, reason in SCENARIOS:
            vllm.play(scenario)
            switched = time.monotonic()

            def follows(status: str = status, reason: str = reason) -> dict[str, Any] | None:
                tier = get_tier(admin_api, ns, "llama")
                c = condition(tier, "TierEffective")
                return tier if c and (c["status"], c["reason"]) == (status, reason) else None

            # The first scenario also waits for sizing and Prometheus' first window.
            timeout = WITHIN + (3 * WINDOW if scenario == "hit" else 0)
            tier = eventually(follows, timeout, f"TierEffective {status} {reason} ({scenario})")
            took = time.monotonic() - switched
            print(f"{scenario}: TierEffective={status} {reason} after {took:.1f} s")
            observed = tier["status"]["observed"]
            assert observed["source"] == "Prometheus"
            assert observed["windowSeconds"] == pytest.approx(WINDOW)
            if scenario == "hit":
                assert observed["externalHitRatio"] == pytest.approx(0.75, rel=0.05)
                assert observed["tPrefillSource"] == "Measured"
                assert observed["measuredTPrefillSeconds"] == pytest.approx(0.005, rel=0.05)
                assert observed["loadSecondsPerBlock"] == pytest.approx(0.02, rel=0.05)
                assert {t["tier"] for t in observed["tiers"]} == {"0:primary", "1:fs"}
                text = operator.metrics()
                assert f'kvtier_tier_effective{{name="llama",namespace="{ns}"}} 1.0' in text
                assert "kvtier_observed_external_hit_ratio{" in text
                wide = cluster.kubectl("get", "kvt", "llama", "-n", ns, "-o", "wide")
                assert wide_column(wide, "EFFECTIVE") == "True"
                assert float(wide_column(wide, "HIT RATIO")) == pytest.approx(0.75, rel=0.05)
                assert float(wide_column(wide, "LOAD/BLOCK")) == pytest.approx(0.02, rel=0.05)
            if scenario == "useless":
                assert observed["externalHitRatio"] == 0
                text = operator.metrics()
                assert f'kvtier_tier_effective{{name="llama",namespace="{ns}"}} 0.0' in text
            if scenario == "slow":
                c = condition(tier, "TierEffective")
                assert c is not None and "recompute is faster" in c["message"]
    finally:
        apply_policy(admin_api, {})


def test_the_charts_tenancy_access_grants_what_the_thanos_tenancy_port_checks(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str
) -> None:
    """metricsSourceAccess=Tenancy binds the operator's ServiceAccount to get
    pods.metrics.k8s.io (the SubjectAccessReview port 9092 makes) and nothing more."""
    chart = REPO / "charts" / "kvtier-operator"
    rendered = subprocess.run(
        [
            cluster.binary("helm"),
            "template",
            "kvtier-operator",
            str(chart),
            "-n",
            "kvtier-system",
            "--set",
            "metricsSourceAccess=Tenancy",
            "--show-only",
            "templates/metrics-source-rbac.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rules = [
        rule
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] == "ClusterRole"
        for rule in doc["rules"]
    ]
    assert rules == [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get"]}]

    def can(verb: str, resource: str, group: str) -> bool:
        """The SubjectAccessReview the Thanos Querier's kube-rbac-proxy makes, as the
        operator's ServiceAccount."""
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=OPERATOR_USER,
                groups=["system:serviceaccounts", "system:serviceaccounts:kvtier-system"],
                resource_attributes=client.V1ResourceAttributes(
                    group=group, resource=resource, verb=verb, namespace=ns
                ),
            )
        )
        result = client.AuthorizationV1Api(admin_api).create_subject_access_review(review)
        return bool(result.status.allowed)

    assert not can("get", "pods", "metrics.k8s.io")
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    try:
        eventually(lambda: can("get", "pods", "metrics.k8s.io"), 10, "tenancy access")
        assert not can("list", "pods", "metrics.k8s.io")
        assert not can("get", "secrets", "")
    finally:
        cluster.kubectl("delete", "-f", "-", stdin=rendered)
