"""`kvtier simulate --tier NAMESPACE/NAME` against a KVCacheTier on a real control plane.

A control plane of its own with the real CRDs, and no operator: the test writes the tier's
status through the status subresource (the CRD's schema checks it) with the figures the
operator records (probe p99 and bandwidth, tier capacities, vLLM's measured t_prefill and hit
figures), then runs the CLI with the admin kubeconfig, as a platform team would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kvtier.cli import main
from localcluster import LocalCluster
from tests.conftest import api_client
from tests.e2e.conftest import own_cluster
from tests.e2e.kube_helpers import GROUP, VERSION, create_tier, new_namespace

STATUS: dict[str, Any] = {
    "diskTier": "nvme",
    "tiers": [
        {"name": "cpu", "ready": True, "capacityBytes": 64 * 2**30},
        {
            "name": "nvme",
            "ready": True,
            "capacityBytes": 2 * 2**40,
            "probe": {"p50Seconds": 0.004, "p99Seconds": 0.012, "bandwidthBytesPerSecond": 2e9},
        },
    ],
    "observed": {
        "windowSeconds": 300,
        "promptTokens": 1_000_000,
        "tokensLocalHit": 200_000,
        "tokensFromOffload": 500_000,
        "externalHitRatio": 0.62,
        "measuredTPrefillSeconds": 0.0002,
    },
}


@pytest.fixture(scope="module")
def cluster_api() -> Iterator[tuple[LocalCluster, client.ApiClient]]:
    with own_cluster("simulate") as cluster:
        yield cluster, api_client(cluster.admin_kubeconfig)


def _tier(api: client.ApiClient, status: dict[str, Any] | None) -> str:
    ns = new_namespace(api, "simulate")
    create_tier(
        api,
        ns,
        "llama",
        {
            "targetRef": {"kind": "LLMInferenceService", "name": "llama"},
            "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "tensorParallelSize": 4},
            "workload": {"averageContextTokens": 30000, "concurrentSessions": 12},
        },
    )
    if status is not None:
        client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "kvcachetiers", "llama", {"status": status}
        )
    return ns


def test_simulate_reads_a_real_tier_and_says_what_was_measured(
    cluster_api: tuple[LocalCluster, client.ApiClient], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, api = cluster_api
    ns = _tier(api, STATUS)
    argv = ["simulate", "--tier", f"{ns}/llama", "--kubeconfig", str(cluster.admin_kubeconfig)]
    assert main([*argv, "--duration", "900", "--warmup", "100", "-o", "json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["model"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert doc["tensorParallelSize"] == 4
    assert doc["workload"]["sessions"] == 12
    assert doc["workload"]["averageContextTokens"] == 30000
    assert doc["disk"] == {
        "type": "NVMe",
        "p99Seconds": 0.012,
        "bandwidthBytesPerSecond": 2e9,
        "shared": False,
    }
    assert doc["derived"]["cpuBytesToUse"] <= 64 * 2**30
    assert doc["derived"]["prefillTokensPerSecond"] == pytest.approx(5000, rel=0.01)
    sources = {i["name"]: i["source"] for i in doc["inputs"]}
    assert sources["NVMe p99"] == sources["NVMe bandwidth"] == sources["prefill"] == "measured"
    assert sources["model"] == sources["workload"] == "spec"
    assert sources["CPU tier"] == "sized"
    assert sources["GPU"] == "assumed"
    assert doc["observed"]["externalHitRatio"] == 0.62
    assert doc["observed"]["gpuHitRatio"] == pytest.approx(0.2)
    assert "measured: NVMe p99 = 0.012 s" in captured.err
    assert [s["scenario"] for s in doc["scenarios"]] == ["none", "cpu", "cpu+disk"]


def test_a_tier_not_yet_probed_runs_on_assumed_figures_and_says_so(
    cluster_api: tuple[LocalCluster, client.ApiClient], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, api = cluster_api
    ns = _tier(api, None)
    argv = ["simulate", "--tier", f"{ns}/llama", "--kubeconfig", str(cluster.admin_kubeconfig)]
    assert main([*argv, "--duration", "900", "--warmup", "100"]) == 0
    err = capsys.readouterr().err
    assert "assumed: prefill = from FLOPs" in err
    assert "warning: simulate: assumed inputs: " in err


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nowhere/none", "--tier: no KVCacheTier nowhere/none"),
        ("justaname", "--tier: 'justaname' is not NAMESPACE/NAME"),
    ],
)
def test_a_missing_tier_is_one_line(
    cluster_api: tuple[LocalCluster, client.ApiClient],
    capsys: pytest.CaptureFixture[str],
    ref: str,
    message: str,
) -> None:
    cluster, _ = cluster_api
    argv = ["simulate", "--tier", ref, "--kubeconfig", str(cluster.admin_kubeconfig)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
