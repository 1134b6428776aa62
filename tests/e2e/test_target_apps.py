"""A plain Deployment and a StatefulSet running vLLM, as vLLM's production-stack chart renders
them, as targets on the real control plane: the pods Kubernetes' own controllers build from
what kvtier patched (the Deployment → ReplicaSet → Pod and StatefulSet → Pod controllers of
kube-controller-manager, the pods run by kwok) carry kvtier's flag in vLLM's argv, one
/dev/shm mount of kvtier's size, the memory and the disk mount; a forced re-apply of the
user's manifest by another manager keeps the user's fields; deleting the tier gives the
user's pod template back; kvtier's own evictor Deployment is never a target; no write once
settled."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client

from kvtier.api.common import quantity_bytes
from kvtier.kube.rest import Kube
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.kube_helpers import (
    apply_policy,
    as_restricted_user,
    create_tier,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY, POOL
from tests.e2e.test_real_contracts import respecting_ignored

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
MANAGER = "helm"
PLURALS = {"Deployment": "deployments", "StatefulSet": "statefulsets"}


def workload(kind: str, name: str) -> dict[str, Any]:
    """The shape of vLLM's production-stack chart: `vllm serve` in the command, a second
    container beside vLLM, the user's own volume and env."""
    labels = {"app": name}
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:v0.24.0",
                        "command": ["vllm", "serve", MODEL, "--tensor-parallel-size", "4"],
                        "args": ["--max-model-len", "131072"],
                        "env": [{"name": "HF_HOME", "value": "/data"}],
                        "volumeMounts": [{"name": "models", "mountPath": "/data"}],
                        "resources": {"limits": {"nvidia.com/gpu": "4", "memory": "64Gi"}},
                    },
                    {"name": "metrics-proxy", "image": "busybox", "args": ["sleep", "inf"]},
                ],
                "volumes": [{"name": "models", "emptyDir": {}}],
            },
        },
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    as_restricted_user(spec["template"])  # the namespaces enforce Pod Security restricted
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _path(ns: str, kind: str, name: str = "") -> str:
    base = f"/apis/apps/v1/namespaces/{ns}/{PLURALS[kind]}"
    return f"{base}/{name}" if name else base


def user_apply(api: client.ApiClient, ns: str, body: dict[str, Any]) -> None:
    """The user's manifest applied by their own tool, forced (a Helm or Argo CD sync)."""
    Kube(api).request(
        "PATCH",
        _path(ns, body["kind"], body["metadata"]["name"]),
        json.dumps({**body, "metadata": {**body["metadata"], "namespace": ns}}),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": MANAGER, "force": "true"},
    )


def live(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = Kube(api).request(
        "GET", _path(ns, body["kind"], body["metadata"]["name"])
    )
    return found


def pods(api: client.ApiClient, ns: str, name: str) -> list[Any]:
    return list(client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"app={name}").items)


def vllm_argv(pod: Any) -> list[str]:
    vllm = next(c for c in pod.spec.containers if c.name == "vllm")
    return [*(vllm.command or []), *(vllm.args or [])]


def flagged_pod(api: client.ApiClient, ns: str, name: str, kind: str) -> Any:
    """The pod the workload's controller built from the template as kvtier left it (an
    earlier rollout's pod, of the user's template or one of a forced re-apply, may still be
    there): its vLLM container's args and resources are the template's."""

    def check() -> Any:
        body = {"kind": kind, "metadata": {"name": name}}
        template = live(api, ns, body)["spec"]["template"]["spec"]["containers"]
        want = next(c for c in template if c["name"] == "vllm")
        for pod in pods(api, ns, name):
            vllm = next(c for c in pod.spec.containers if c.name == "vllm")
            limits = (vllm.resources.limits or {}) if vllm.resources else {}
            if (
                pod.metadata.deletion_timestamp is None
                and "--kv-transfer-config" in vllm_argv(pod)
                and (vllm.args or []) == want.get("args", [])
                and limits.get("memory")
                == want.get("resources", {}).get("limits", {}).get("memory")
            ):
                return pod
        return None

    return eventually(check, 120, f"a pod of {name} with kvtier's flag")


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "apps")


@pytest.mark.parametrize(
    "kind,disk",
    [("Deployment", {"type": "None"}), ("StatefulSet", {"type": "NVMe", "nvme": {"pool": POOL}})],
)
def test_the_pods_kubernetes_builds_carry_the_tier(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, kind: str, disk: dict[str, Any]
) -> None:
    name = f"llama-{kind.lower()}"
    user = workload(kind, name)
    user_apply(admin_api, ns, user)
    create_tier(
        admin_api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 16},
            "disk": disk,
            "probe": {"enabled": False},
        },
    )
    tier = wait_condition(admin_api, ns, name, "Ready", "True", timeout=120)
    sizing = tier["status"]["sizing"]
    pod = flagged_pod(admin_api, ns, name, kind)
    argv = vllm_argv(pod)
    # vLLM's final argv: the user's command and args first, then kvtier's flag.
    assert argv[:7] == [
        *user["spec"]["template"]["spec"]["containers"][0]["command"],
        *[
            "--max-model-len",
            "131072",
        ],
    ]
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config["kv_connector_extra_config"]["cpu_bytes_to_use"] == sizing["cpuBytesToUse"]
    vllm = next(c for c in pod.spec.containers if c.name == "vllm")
    shm = [m for m in vllm.volume_mounts if m.mount_path == "/dev/shm"]
    if disk["type"] == "None":  # vLLM 0.24 keeps a CPU-only tier in private memory
        assert shm == []
    else:  # the tiering spec maps its CPU tier in /dev/shm: exactly one mount of its size
        assert len(shm) == 1
        volume = next(v for v in pod.spec.volumes if v.name == shm[0].name)
        assert volume.empty_dir.medium == "Memory"
        assert quantity_bytes(volume.empty_dir.size_limit) >= sizing["cpuBytesToUse"]
    limit = quantity_bytes(vllm.resources.limits["memory"])
    assert limit > 64 * 1024**3 + sizing["cpuBytesToUse"]
    assert {"/data"} <= {m.mount_path for m in vllm.volume_mounts}
    if disk["type"] == "NVMe":
        assert "/mnt/kv-cache" in {m.mount_path for m in vllm.volume_mounts}
    # The other container and the user's own fields are untouched.
    side = next(c for c in pod.spec.containers if c.name == "metrics-proxy")
    assert side.args == ["sleep", "inf"]
    assert not [m for m in side.volume_mounts or [] if m.name.startswith("kvtier-")]
    assert {"name": "HF_HOME", "value": "/data"} in [
        {"name": e.name, "value": e.value} for e in vllm.env
    ]


def test_argo_cd_syncs_keep_the_users_fields_without_a_write(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    """Argo CD self-heal with RespectIgnoreDifferences and deploy/argocd's ignoreDifferences
    for Deployments: each sync carries the live values of kvtier's fields, so it changes
    nothing, keeps every field of the user's, and kvtier writes nothing back."""
    name = "llama-deployment"
    user = workload("Deployment", name)
    before = live(admin_api, ns, user)
    start = time.time()
    for _ in range(5):
        current = live(admin_api, ns, user)
        body = respecting_ignored(user, current)
        Kube(admin_api).request(
            "PATCH",
            _path(ns, "Deployment", name),
            json.dumps({**body, "metadata": {**body["metadata"], "namespace": ns}}),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "argocd-controller", "force": "true"},
        )
    operator.wait_resyncs()  # what the syncs left is looked at again, twice
    after = live(admin_api, ns, user)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    vllm = after["spec"]["template"]["spec"]["containers"][0]
    assert vllm["command"] == user["spec"]["template"]["spec"]["containers"][0]["command"]
    assert vllm["args"][:2] == ["--max-model-len", "131072"]
    assert "--kv-transfer-config" in vllm["args"]
    assert any(v["name"] == "models" for v in after["spec"]["template"]["spec"]["volumes"])
    writes = audit.writes(cluster.audit_log, since=start, namespace=ns)
    assert sum(n for (_, res), n in writes.items() if res == "deployments") == 0


def test_no_write_once_settled_over_two_resyncs(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    for name in ("llama-deployment", "llama-statefulset"):
        wait_condition(admin_api, ns, name, "Ready", "True", timeout=60)
    time.sleep(5)
    names: list[str] = []
    writes = audit.idle_writes(cluster.audit_log, operator, names=names, namespace=ns)
    assert sum(writes.values()) == 0, names


def test_kvtiers_own_evictor_deployment_is_never_a_target(
    admin_api: client.ApiClient, ns: str
) -> None:
    own = workload("Deployment", "kvtier-evictor-x")
    own["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kvtier"}
    user_apply(admin_api, ns, own)
    create_tier(
        admin_api,
        ns,
        "own",
        {
            "mode": "Apply",
            "targetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "kvtier-evictor-x",
            },
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 16},
            "disk": {"type": "None"},
        },
    )
    tier = wait_condition(admin_api, ns, "own", "TargetFound", "False", timeout=60)
    found = next(c for c in tier["status"]["conditions"] if c["type"] == "TargetFound")
    assert "never a model server" in found["message"]
    after = live(admin_api, ns, own)
    assert "kvcache.io/applied" not in (after["metadata"].get("annotations") or {})


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_deleting_the_tier_gives_the_users_template_back(
    admin_api: client.ApiClient, ns: str, kind: str
) -> None:
    name = f"llama-{kind.lower()}"
    user = workload(kind, name)
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    eventually(
        lambda: (
            not any(
                t["metadata"]["name"] == name
                for t in client.CustomObjectsApi(admin_api).list_namespaced_custom_object(
                    "kvcache.io", "v1alpha1", ns, "kvcachetiers"
                )["items"]
            )
        ),
        60,
        "the tier's deletion",
    )
    back = live(admin_api, ns, user)
    template = back["spec"]["template"]["spec"]
    mine = user["spec"]["template"]["spec"]
    vllm = template["containers"][0]
    assert vllm["command"] == mine["containers"][0]["command"]
    assert vllm["args"] == mine["containers"][0]["args"]
    assert vllm["env"] == mine["containers"][0]["env"]
    assert vllm["volumeMounts"] == mine["containers"][0]["volumeMounts"]
    assert vllm["resources"]["limits"]["memory"] == "64Gi"
    assert [v["name"] for v in template["volumes"]] == ["models"]
    assert "kvcache.io/applied" not in (back["metadata"].get("annotations") or {})
