"""DiskPressure end to end, in the observed-health harness: a real Prometheus (built from its
Go module, hack/prometheus/build) scrapes small servers in the test that stand in for the
evictor sidecars of an NVMe tier's model-server pods (kwok pods do not run), serving the
exposition kvtier evict's own metrics code renders for a scripted fill level; the operator on
the local control plane reads it through the client it uses on a cluster, and the tier's
DiskPressure, status.tiers[].usedBytes and kvtier_tier_disk_pressure follow the script. The
same Prometheus scrapes the operator and evaluates the chart's own alert rules, so the
KVCacheTierDiskPressure alert is seen pending while the tier is under pressure.

The script crosses the 85 % high watermark from just below to just above: at 84 % the
condition stays False for as long as a flip may take, at 86 % it turns True; back at 70 %
(below the 10 % hysteresis band under the watermark) it clears."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kvtier.observe.prometheus import PrometheusClient, PrometheusSource, QueryError
from localcluster import LocalCluster
from tests import evictor_exposition as ex
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
from tests.e2e.real_prometheus import REPO, running_prometheus
from tests.e2e.test_observed_health import wide_column
from tests.metrics_server import MetricsServer

TARGET = "llama-70b"
LEADER = f"{TARGET}-kserve-0"  # the fuller pod, whose evictor speaks for the tier
OTHER = f"{TARGET}-kserve-1"  # a second replica's evictor, less full
WINDOW = 15  # seconds: the observation window
INTERVAL = 5  # seconds between evaluations of a tier
SCRAPE = 1  # Prometheus scrape interval
# Above the watermark for a full window, plus two agreeing evaluations, plus the scrape and
# the status write: about two windows when idle (27.5 s measured); the wait allows a third
# window for the evaluations a loaded machine (the full suite under CI) delays.
WITHIN = 3 * WINDOW + 2 * INTERVAL
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": "local-nvme",
            "mountPath": "/var/mnt/nvme",
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
        }
    ],
}


class EvictorServer:
    """Serves one evictor's /metrics after a pass at the current scripted usage."""

    def __init__(self, usage: float) -> None:
        self.usage = usage
        self.server = MetricsServer(lambda: ex.exposition(self.usage))
        self.port = self.server.port

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture(scope="module")
def evictors() -> Iterator[dict[str, EvictorServer]]:
    servers = {LEADER: EvictorServer(0.60), OTHER: EvictorServer(0.40)}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    return new_namespace(admin_api, "diskpressure")


def chart_rules(cluster: LocalCluster) -> str:
    """The groups of the chart's PrometheusRule: a Prometheus rule file as they stand."""
    rendered = subprocess.run(
        [
            cluster.binary("helm"),
            "template",
            "kvtier-operator",
            str(REPO / "charts" / "kvtier-operator"),
            "--set",
            "prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return yaml.safe_dump({"groups": yaml.safe_load(rendered)["spec"]["groups"]})


@pytest.fixture(scope="module")
def prometheus(
    evictors: dict[str, EvictorServer],
    ns: str,
    cluster: LocalCluster,
    operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("prometheus")
    (workdir / "rules.yml").write_text(chart_rules(cluster))
    targets = "".join(
        f'      - targets: ["127.0.0.1:{server.port}"]\n'
        f"        labels: {{namespace: {ns}, pod: {pod}}}\n"
        for pod, server in evictors.items()
    )
    config = (
        f"global: {{scrape_interval: {SCRAPE}s, scrape_timeout: {SCRAPE}s, "
        f"evaluation_interval: {SCRAPE}s}}\n"
        f"rule_files: [{workdir / 'rules.yml'}]\n"
        "scrape_configs:\n"
        "  - job_name: kvtier-operator\n"
        "    static_configs:\n"
        f'      - targets: ["127.0.0.1:{operator.metrics_port}"]\n'
        "  - job_name: kvtier-evictor\n"
        "    static_configs:\n" + targets
    )
    with running_prometheus(workdir, config) as url:
        yield url


def samples(text: str, labels: dict[str, str]) -> dict[str, float]:
    """The operator's samples with exactly these labels, by name."""
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels == labels
    }


def alert_states(prom: PrometheusClient, ns: str) -> set[str]:
    """The states of the KVCacheTierDiskPressure alerts on the tier's NVMe tier."""
    query = f'ALERTS{{alertname="KVCacheTierDiskPressure",namespace="{ns}",tier="nvme"}}'
    data = prom.query(query)
    assert not isinstance(data, QueryError), data
    return {r["metric"]["alertstate"] for r in data["result"]}


# (usage of the fuller pod, DiskPressure status, reason, whether it must hold for WITHIN)
SCRIPT = [
    (0.60, "False", "BelowHighWatermark", False),
    (0.84, "False", "BelowHighWatermark", True),  # just below the 85 % watermark
    (0.86, "True", "AboveHighWatermark", False),  # just above it
    (0.70, "False", "BelowHighWatermark", False),
]


def test_disk_pressure_turns_true_just_above_the_watermark_and_not_just_below(
    admin_api: client.ApiClient,
    cluster: LocalCluster,
    operator: OperatorProcess,
    evictors: dict[str, EvictorServer],
    prometheus: str,
    ns: str,
) -> None:
    """SCRIPT's fill levels in turn: DiskPressure, its message's figures, usedBytes, the
    gauges, the wide column and the chart's alert follow each; at 84 % the condition holds
    False for WITHIN, at 86 % it turns True."""
    apply_policy(
        admin_api,
        {
            **POLICY,
            "metrics": {
                "prometheus": {"url": prometheus, "serviceAccountToken": False},
                "windowSeconds": WINDOW,
                "intervalSeconds": INTERVAL,
            },
        },
    )
    create_target(
        admin_api,
        ns,
        llm_inference_service(TARGET, tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct"),
    )
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Plan",
            "targetRef": {"kind": "LLMInferenceService", "name": TARGET},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
            "disk": {"type": "NVMe", "nvme": {"pool": "local-nvme"}},
        },
    )
    prom = PrometheusClient(PrometheusSource(prometheus))
    try:
        for step, (usage, status, reason, hold) in enumerate(SCRIPT):
            evictors[LEADER].usage = usage
            switched = time.monotonic()
            figures = f"({usage:.0%}, high watermark 85%)"

            def follows(
                status: str = status, reason: str = reason, figures: str = figures
            ) -> dict[str, Any] | None:
                """The tier once its condition says `status` for this very fill level."""
                tier = get_tier(admin_api, ns, "llama")
                c = condition(tier, "DiskPressure")
                if c and (c["status"], c["reason"]) == (status, reason) and figures in c["message"]:
                    return tier
                return None

            # The first step also waits for sizing and Prometheus' first window.
            timeout = WITHIN + (3 * WINDOW if step == 0 else 0)
            tier = eventually(follows, timeout, f"DiskPressure {status} {reason} at {usage:.0%}")
            took = time.monotonic() - switched
            print(f"{usage:.0%}: DiskPressure={status} {reason} after {took:.1f} s")
            if hold:
                # Just below the watermark: it must not flip in the time a flip may take
                # (WITHIN, the wait allowed for the flip at 86 % next), counted from the
                # moment the operator reported this fill level.
                held = time.monotonic()
                while time.monotonic() - held < WITHIN:
                    assert follows(), (
                        usage,
                        condition(get_tier(admin_api, ns, "llama"), "DiskPressure"),
                    )
                    time.sleep(1)
                print(f"{usage:.0%}: still DiskPressure={status} {reason} {WITHIN} s later")
            c = condition(tier, "DiskPressure")
            assert c is not None and f"pod {LEADER}" in c["message"]
            ready = condition(tier, "Ready")
            assert ready is not None and ready["status"] == "True"  # never blocked by it
            wide = cluster.kubectl("get", "kvt", "llama", "-n", ns, "-o", "wide")
            assert wide_column(wide, "DISK PRESSURE") == status
            nvme = next(t for t in tier["status"]["tiers"] if t["name"] == "nvme")
            assert nvme["usedBytes"] == int(usage * ex.CAPACITY)
            labels = {"namespace": ns, "name": "llama", "tier": "nvme"}
            gauges = samples(operator.metrics(), labels)
            assert gauges["kvtier_tier_disk_pressure"] == (1 if status == "True" else 0)
            assert gauges["kvtier_tier_used_bytes"] == int(usage * ex.CAPACITY)
            # The chart's alert: pending (its `for` is 15 minutes) exactly while True.
            want = {"pending"} if status == "True" else set()

            def alerts_are(want: set[str] = want) -> bool:
                return alert_states(prom, ns) == want

            eventually(alerts_are, WITHIN, f"KVCacheTierDiskPressure alerts {want or 'gone'}")
    finally:
        apply_policy(admin_api, {})
