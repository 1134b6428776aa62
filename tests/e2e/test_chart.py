"""The Helm chart on the real control plane: lint, server-side dry runs of default and full
values, a real install whose ServiceAccount token runs the operator through the Plan-mode
scenario, idempotent `kubectl apply -k deploy/manifests`, and schema errors that name the
field."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster import LocalCluster, upstream_crds, write_kubeconfig
from tests.e2e import audit
from tests.e2e.conftest import create_target, llm_inference_service
from tests.e2e.kube_helpers import (
    POD_SECURITY_LABELS,
    create_restricted_namespace,
    create_tier,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kvtier-operator"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
MANIFESTS = REPO / "deploy" / "manifests"
# Stand-ins for the Prometheus Operator kinds the full values render.


def helm(cluster: LocalCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [cluster.binary("helm"), f"--kubeconfig={cluster.admin_kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {proc.stderr}")
    return proc


def kinds(rendered: str) -> list[str]:
    return [d["kind"] for d in yaml.safe_load_all(rendered) if d]


@pytest.fixture(scope="module")
def openshift_like(cluster: LocalCluster, crds: None) -> None:
    """What the full values expect of an OpenShift cluster with monitoring."""
    # prometheus-operator's own CRDs, from its Go module (hack/localcluster/upstream-crds).
    cluster.install_crds(upstream_crds("monitoring"))
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "openshift-config-managed", "labels": POD_SECURITY_LABELS},
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(ns))


def test_lint(cluster: LocalCluster) -> None:
    helm(cluster, "lint", "--strict", str(CHART))
    helm(cluster, "lint", "--strict", str(CHART), "-f", str(FULL_VALUES))


def test_default_values_dry_run(cluster: LocalCluster, crds: None) -> None:
    rendered = helm(cluster, "template", "kvtier-operator", str(CHART), "-n", "kvtier-system")
    assert sorted(set(kinds(rendered.stdout))) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
        stdin=rendered.stdout,
    )  # fmt: skip


def test_full_values_dry_run(cluster: LocalCluster, openshift_like: None) -> None:
    rendered = helm(
        cluster, "template", "kvtier-operator", str(CHART), "-n", "kvtier-system",
        "-f", str(FULL_VALUES), "--api-versions", "kvcache.io/v1alpha1",
    ).stdout  # fmt: skip
    assert {"ServiceMonitor", "PrometheusRule", "KVCachePolicy", "ConfigMap", "Namespace"} <= set(
        kinds(rendered)
    )
    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all(rendered)
        if d and not d["metadata"]["name"].endswith(("-service-ca", "-scraper", "-token"))
    }
    alerts = {r["alert"] for g in docs["PrometheusRule"]["spec"]["groups"] for r in g["rules"]}
    assert alerts == {
        "KVCacheTierNotReady",
        "KVCacheTierNotBeneficial",
        "KVCacheTierNotEffective",
        "KVCacheTierDiskPressure",
        "KVCacheTierProbeP99High",
        "KVTierReconcileErrors",
        "KVTierOperatorDown",
    }
    dashboard = docs["ConfigMap"]
    assert dashboard["metadata"]["labels"]["console.openshift.io/dashboard"] == "true"
    json.loads(dashboard["data"]["kvtier.json"])
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
        stdin=rendered,
    )  # fmt: skip


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors of a page (its headings here are single words)."""
    return {line.lstrip("#").strip().lower() for line in markdown.splitlines() if line[:3] == "## "}


def test_full_values_secure_scrape_and_disruption_budget(cluster: LocalCluster) -> None:
    """The ServiceMonitor scrapes over HTTPS with the service CA bundle and the scraper's
    token; that token's ServiceAccount is bound to the metrics-reader role; the pod mounts
    the Secret the Service's serving-cert annotation names; every alert links its runbook;
    two replicas get a PodDisruptionBudget over the Deployment's pods."""
    rendered = helm(
        cluster, "template", "kvtier-operator", str(CHART), "-n", "kvtier-system",
        "-f", str(FULL_VALUES),
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    (endpoint,) = by[("ServiceMonitor", "kvtier-operator")]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    secret = by[("Secret", endpoint["authorization"]["credentials"]["name"])]
    assert secret["type"] == "kubernetes.io/service-account-token"
    scraper = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    assert ("ServiceAccount", scraper) in by
    binding = by[("ClusterRoleBinding", scraper)]
    assert binding["roleRef"]["name"] == "kvtier-operator-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": scraper, "namespace": "kvtier-system"}
    ]
    ca = by[("ConfigMap", endpoint["tlsConfig"]["ca"]["configMap"]["name"])]
    assert ca["metadata"]["annotations"]["service.beta.openshift.io/inject-cabundle"] == "true"
    service = by[("Service", "kvtier-operator-metrics")]
    assert endpoint["tlsConfig"]["serverName"] == "kvtier-operator-metrics.kvtier-system.svc"
    tls_secret = service["metadata"]["annotations"][
        "service.beta.openshift.io/serving-cert-secret-name"
    ]
    deployment = by[("Deployment", "kvtier-operator")]
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == tls_secret
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert f"--metrics-cert-file={mount['mountPath']}/tls.crt" in container["args"]
    assert f"--metrics-key-file={mount['mountPath']}/tls.key" in container["args"]
    assert "--metrics-insecure" not in container["args"]

    runbooks = _anchors((REPO / "docs" / "alerts.md").read_text())
    home = yaml.safe_load((CHART / "Chart.yaml").read_text())["home"]
    rules = [
        r for g in by[("PrometheusRule", "kvtier-operator")]["spec"]["groups"] for r in g["rules"]
    ]
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == f"{home}/blob/main/docs/alerts.md", url
        assert anchor == rule["alert"].lower() and anchor in runbooks, url

    budget = by[("PodDisruptionBudget", "kvtier-operator")]
    assert deployment["spec"]["replicas"] == 2
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_plain_http_is_an_explicit_choice(cluster: LocalCluster) -> None:
    """metrics.secure=false: --metrics-insecure, no certificate Secret, a plain scrape."""
    rendered = helm(
        cluster, "template", "x", str(CHART), "--set", "metrics.secure=false",
        "--set", "metrics.serviceMonitor.enabled=true",
    ).stdout  # fmt: skip
    docs = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d}
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert "--metrics-insecure" in container["args"]
    assert not any("secret" in v for v in docs["Deployment"]["spec"]["template"]["spec"]["volumes"])
    assert "annotations" not in docs["Service"]["metadata"]
    assert "scheme" not in docs["ServiceMonitor"]["spec"]["endpoints"][0]
    assert "Secret" not in docs and "PodDisruptionBudget" not in docs


def test_network_policy_admits_only_scrapes_and_reaches_only_api_and_dns(
    cluster: LocalCluster,
) -> None:
    """The policy deploy/manifests ships is the chart's own, selects the operator pods,
    lets in only the metrics port from the monitoring namespaces, lets out only the API
    server and DNS ports, and the API server stores it."""
    rendered = helm(cluster, "template", "kvtier-operator", str(CHART), "-n", "kvtier-system")
    docs = {d["kind"]: d for d in yaml.safe_load_all(rendered.stdout) if d}
    shipped = [
        d for d in yaml.safe_load_all((MANIFESTS / "operator.yaml").read_text())
        if d and d["kind"] == "NetworkPolicy"
    ]  # fmt: skip
    policy = docs["NetworkPolicy"]
    policy["metadata"]["labels"].pop("app.kubernetes.io/managed-by")
    assert shipped == [policy]
    deployment = docs["Deployment"]
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert "metrics" in {p["name"] for p in ports}
    assert ingress["from"] == [
        {"namespaceSelector": {"matchLabels": {"network.openshift.io/policy-group": "monitoring"}}}
    ]
    egress = {
        (p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"]
    }
    assert egress == {
        (443, "TCP"),
        (6443, "TCP"),
        (53, "UDP"),
        (53, "TCP"),
        (5353, "UDP"),
        (5353, "TCP"),
        # vLLM's metrics: the Thanos Querier (9091, tenancy 9092) or the model servers (8000);
        # by direct scrape, the disk tiers' evictors too (9466).
        (9091, "TCP"),
        (9092, "TCP"),
        (8000, "TCP"),
        (9466, "TCP"),
    }
    assert all("to" not in rule for rule in policy["spec"]["egress"])
    ns = f"netpol-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    try:
        cluster.kubectl(
            "apply",
            "-n",
            ns,
            "-f",
            "-",
            stdin=yaml.safe_dump({**policy, "metadata": {**policy["metadata"], "namespace": ns}}),
        )
        stored = json.loads(
            cluster.kubectl("get", "networkpolicy", "-n", ns, "kvtier-operator", "-o", "json")
        )
        assert stored["spec"]["ingress"] == policy["spec"]["ingress"]
        assert len(stored["spec"]["egress"]) == len(policy["spec"]["egress"])
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false")


def test_policy_waits_for_its_api(cluster: LocalCluster) -> None:
    out = helm(cluster, "template", "x", str(CHART), "--set", "policy.enabled=true").stdout
    assert "KVCachePolicy" not in kinds(out)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("operator.metricsPort=70000", "/operator/metricsPort"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("crds.enabled=yes", "/crds/enabled"),
        ("prometheusRule.probeP99CeilingSeconds=0", "/prometheusRule/probeP99CeilingSeconds"),
        ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
        ("image.tga=1", "'tga' not allowed"),
    ],
)
def test_schema_rejects_bad_values(cluster: LocalCluster, value: str, words: str) -> None:
    proc = helm(cluster, "template", "x", str(CHART), "--set", value, check=False)
    assert proc.returncode != 0
    assert words in proc.stderr, proc.stderr


def operator_pods(cluster: LocalCluster, namespace: str) -> list[Any]:
    """The operator pods the Deployment's ReplicaSet got admitted (kwok runs them)."""
    out = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=kvtier-operator",
        "-o", "json",
    )  # fmt: skip
    items: list[Any] = json.loads(out)["items"]
    return items


@pytest.fixture(scope="module")
def release(
    cluster: LocalCluster, admin_api: client.ApiClient, crds: None
) -> Iterator[tuple[str, str]]:
    """A real release beside the cluster's own kvtier-system identity (CRDs already there),
    in a namespace that enforces Pod Security `restricted`."""
    name = f"kvt-{uuid.uuid4().hex[:5]}"
    namespace = create_restricted_namespace(admin_api, f"{name}-system")
    helm(
        cluster, "install", name, str(CHART), "-n", namespace, "--set", "crds.enabled=false",
    )  # fmt: skip
    try:
        yield name, namespace
    finally:
        helm(cluster, "uninstall", name, "-n", namespace, "--wait", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")


def test_chart_operator_pod_is_admitted_under_restricted(
    cluster: LocalCluster, release: tuple[str, str]
) -> None:
    """The ReplicaSet's pod exists: PodSecurity `restricted` admitted the chart's pod spec
    (a refused pod would leave only a FailedCreate event)."""
    _, namespace = release
    pods = eventually(lambda: operator_pods(cluster, namespace), what="the operator pod")
    assert pods[0]["spec"]["securityContext"]["runAsNonRoot"] is True
    labels = json.loads(cluster.kubectl("get", "namespace", namespace, "-o", "json"))
    assert labels["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def can_i(cluster: LocalCluster, kubeconfig: Path, *args: str) -> bool:
    proc = subprocess.run(
        [cluster.binary("kubectl"), f"--kubeconfig={kubeconfig}", "auth", "can-i", *args, "-A"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() == "yes"


def test_operator_runs_under_the_charts_service_account(
    cluster: LocalCluster,
    admin_api: client.ApiClient,
    release: tuple[str, str],
    tmp_path: Path,
    operator: OperatorProcess,
) -> None:
    name, namespace = release
    sa = f"{name}-kvtier-operator"
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").strip()
    kubeconfig = write_kubeconfig(
        tmp_path / "chart.kubeconfig",
        cluster.server,
        cluster.workdir / "pki" / "ca.crt",
        sa,
        token=token,
    )
    assert can_i(cluster, kubeconfig, "patch", "kvcachetiers.kvcache.io", "--subresource=status")
    assert not can_i(cluster, kubeconfig, "get", "secrets")

    ns = new_namespace(admin_api, "chart")
    create_target(
        admin_api,
        ns,
        llm_inference_service(
            "nemotron-ultra", tp=8, model_uri="hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
        ),
    )
    create_target(
        admin_api, ns, llm_inference_service("gpt-oss", tp=2, model_uri="hf://openai/gpt-oss-120b")
    )
    # Only the chart's identity acts meanwhile: the session's operator pauses.
    operator.stop()
    start = time.time()
    proc = OperatorProcess(
        cluster, tmp_path / "operator.log", kubeconfig=kubeconfig, namespace=namespace
    ).start()
    try:
        create_tier(
            admin_api,
            ns,
            "nemotron",
            {
                "mode": "Plan",
                "targetRef": {"kind": "LLMInferenceService", "name": "nemotron-ultra"},
                "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
            },
        )
        tier = wait_condition(admin_api, ns, "nemotron", "Ready", "True", "Planned")
        create_tier(
            admin_api,
            ns,
            "gptoss",
            {
                "mode": "Apply",
                "targetRef": {"kind": "LLMInferenceService", "name": "gpt-oss"},
                "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
                "disk": {"type": "None"},
            },
        )
        applied = wait_condition(admin_api, ns, "gptoss", "Ready", "True", "Applied")
    finally:
        proc.stop()
        operator.start()
    assert tier["status"]["sizing"]["bytesPerToken"] == 262144
    assert tier["status"]["observedGeneration"] == tier["metadata"]["generation"]
    assert "kvcache.io/cleanup" in applied["metadata"]["finalizers"]
    user = f"system:serviceaccount:{namespace}:{sa}"
    writes = audit.writes(cluster.audit_log, user=user, since=start)
    assert writes[("patch", "llminferenceservices")] >= 1  # the Apply-mode target patch
    assert writes[("patch", "kvcachetiers/status")] >= 2


def _versions(cluster: LocalCluster) -> dict[str, str]:
    """kind/namespace/name -> what only a real change moves (generation where there is one:
    a Deployment's status keeps changing while its pod starts)."""
    objs = yaml.safe_load(cluster.kubectl("get", "-k", str(MANIFESTS), "-o", "yaml"))["items"]
    return {
        f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": str(
            o["metadata"]["generation"]
            if o["kind"] == "Deployment"
            else o["metadata"]["resourceVersion"]
        )
        for o in objs
    }


def test_apply_k_is_idempotent(cluster: LocalCluster, crds: None) -> None:
    try:
        cluster.kubectl("apply", "-k", str(MANIFESTS))
        before = _versions(cluster)
        second = cluster.kubectl("apply", "-k", str(MANIFESTS))
        lines = [line for line in second.splitlines() if line.strip()]
        assert lines and all(line.endswith(" unchanged") for line in lines), second
        assert _versions(cluster) == before
        assert len(before) == len(lines)
        # kvtier-system enforces Pod Security `restricted` (its Namespace in rbac.yaml) and
        # the operator pod of operator.yaml is admitted there.
        assert eventually(lambda: operator_pods(cluster, "kvtier-system"), what="operator pod")
    finally:
        # Keep the cluster's identity and CRDs; drop the (simulated) operator pod.
        cluster.kubectl(
            "delete", "-n", "kvtier-system", "deployment/kvtier-operator",
            "service/kvtier-operator-metrics", "--ignore-not-found",
        )  # fmt: skip
