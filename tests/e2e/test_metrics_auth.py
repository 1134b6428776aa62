"""/metrics on the real control plane: HTTPS with a serving certificate, and only scrapers
whose token the API server authenticates and whose user may `get` /metrics (the chart's
metrics-reader ClusterRole, applied with deploy/manifests/rbac.yaml) read it."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster import LocalCluster
from tests.certs import ServingCert, serving_cert
from tests.e2e.kube_helpers import eventually
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.real_prometheus import running_prometheus

REPO = Path(__file__).resolve().parents[2]
READER = "kvtier-operator-metrics-reader"


def test_rbac_manifest_carries_the_reader_role() -> None:
    """The role the cluster starts with is the chart's own (rendered into rbac.yaml)."""
    docs = list(yaml.safe_load_all((REPO / "deploy" / "manifests" / "rbac.yaml").read_text()))
    (reader,) = [d for d in docs if d and d["metadata"]["name"] == READER]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> ServingCert:
    return serving_cert(tmp_path_factory.mktemp("metrics-tls"))


@pytest.fixture(scope="module")
def secure_operator(
    cluster: LocalCluster,
    crds: None,
    cert: ServingCert,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """A second operator process (a leader-election standby beside any session operator):
    it serves /metrics all the same."""
    log = tmp_path_factory.mktemp("secure-operator") / "operator.log"
    proc = OperatorProcess(
        cluster,
        log,
        metrics_args=(f"--metrics-cert-file={cert.cert}", f"--metrics-key-file={cert.key}"),
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def scrapers(cluster: LocalCluster, admin_api: client.ApiClient) -> Iterator[tuple[str, str]]:
    """Tokens of two ServiceAccounts: one bound to the metrics-reader role, one not."""
    ns = f"scrape-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(admin_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    for sa in ("prometheus", "stranger"):
        core.create_namespaced_service_account(
            ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa))
        )
    binding = f"{ns}-metrics-reader"
    cluster.kubectl(
        "create", "clusterrolebinding", binding, f"--clusterrole={READER}",
        f"--serviceaccount={ns}:prometheus",
    )  # fmt: skip
    tokens = tuple(
        cluster.kubectl("create", "token", sa, "-n", ns, "--duration=1h").strip()
        for sa in ("prometheus", "stranger")
    )
    try:
        yield tokens[0], tokens[1]
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def trusting(cert: ServingCert) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert.ca))


def status_of(proc: OperatorProcess, cert: ServingCert, token: str | None) -> int:
    try:
        proc.metrics(trusting(cert), token)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def test_bound_scraper_reads_metrics(
    secure_operator: OperatorProcess, cert: ServingCert, scrapers: tuple[str, str]
) -> None:
    body = secure_operator.metrics(trusting(cert), scrapers[0])
    assert "kvtier_reconcile_total" in body or "kvtier_events_dropped_total" in body


def test_unbound_scraper_is_forbidden(
    secure_operator: OperatorProcess, cert: ServingCert, scrapers: tuple[str, str]
) -> None:
    assert status_of(secure_operator, cert, scrapers[1]) == 403


def test_no_token_or_a_forged_one_is_unauthorized(
    secure_operator: OperatorProcess, cert: ServingCert
) -> None:
    assert status_of(secure_operator, cert, None) == 401
    assert status_of(secure_operator, cert, "not-a-token") == 401


def test_certificate_is_the_one_given(
    secure_operator: OperatorProcess, cert: ServingCert, tmp_path: Path
) -> None:
    """A client that trusts another CA refuses the server: it serves the given certificate,
    not some default one; plain HTTP gets no metrics."""
    other = serving_cert(tmp_path / "other")
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        secure_operator.metrics(trusting(other), "x")
    plain = f"http://127.0.0.1:{secure_operator.metrics_port}/metrics"
    with pytest.raises(OSError), urllib.request.urlopen(plain, timeout=5) as r:
        r.read()


@pytest.fixture(scope="module")
def prometheus(
    secure_operator: OperatorProcess,
    cert: ServingCert,
    scrapers: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A real Prometheus scraping the operator as the chart's ServiceMonitor does: https,
    the CA that signed the serving certificate, a bearer token; once with the bound
    scraper's token, once with the stranger's."""
    workdir = tmp_path_factory.mktemp("prometheus")
    jobs = []
    for job, token in (("reader", scrapers[0]), ("stranger", scrapers[1])):
        (workdir / f"{job}.token").write_text(token)
        jobs.append(
            {
                "job_name": job,
                "scheme": "https",
                "tls_config": {"ca_file": str(cert.ca)},
                "authorization": {"credentials_file": str(workdir / f"{job}.token")},
                "static_configs": [{"targets": [f"127.0.0.1:{secure_operator.metrics_port}"]}],
            }
        )
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs}
    with running_prometheus(workdir, yaml.safe_dump(config)) as url:
        yield url


def query(url: str, promql: str) -> list[Any]:
    q = urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=2) as resp:
            result: list[Any] = json.loads(resp.read())["data"]["result"]
    except OSError:
        return []
    return result


def test_real_prometheus_scrapes_with_the_token_and_ca(prometheus: str) -> None:
    """up is 1 for the bound scraper and its kvtier series are stored; the stranger's scrape
    fails (up 0) and stores none."""

    def up() -> dict[str, str] | None:
        rows = {r["metric"]["job"]: r["value"][1] for r in query(prometheus, "up")}
        return rows if {"reader", "stranger"} <= set(rows) else None

    assert eventually(up, 30, "both scrapes to run") == {"reader": "1", "stranger": "0"}
    series = query(prometheus, 'kvtier_events_dropped_total{job="reader"}')
    assert len(series) == 1
    assert query(prometheus, '{job="stranger", __name__=~"kvtier_.*"}') == []
