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
    docs = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d}
    alerts = {r["alert"] for g in docs["PrometheusRule"]["spec"]["groups"] for r in g["rules"]}
    assert alerts == {
        "KVCacheTierNotReady",
        "KVCacheTierNotBeneficial",
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
