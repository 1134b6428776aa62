"""A LeaderWorkerSet running vLLM as a target, with LeaderWorkerSet's own controller building
its pods: the pod is the truth.

LWS v0.8.0's manager (sigs.k8s.io/lws cmd, built unchanged by hack/lws/build, run by
hack/localcluster/lws_controller.py with its webhooks served for real) turns the LWS kvtier
patched into a leader StatefulSet and one worker StatefulSet per group, and
kube-controller-manager's StatefulSet controller turns those into pods (run by kwok). On a
control plane of its own: LWS's webhooks would otherwise reach every other test's objects.

Each pod's vLLM command line is its container's command and args, with the $(VAR)s the
kubelet expands from the pod's env (LWS's pod webhook sets LWS_LEADER_ADDRESS), run with a
stub `vllm` that records its argv. The checks: every pod that starts vLLM gets kvtier's
cpu_bytes_to_use; a worker that only joins the leader's Ray cluster keeps its own command;
every pod has one /dev/shm mount of kvtier's per-pod size, kvtier's memory and (NVMe) the
disk mount; an Argo CD self-heal sync changes nothing; nothing is written once settled;
deleting the tier gives the user's templates back, and LWS's pods follow.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from kvtier.kube.rest import Kube
from kvtier.render.quantities import quantity_to_bytes
from kvtier.targets.pod import KV_FLAG
from localcluster import LocalCluster
from lws_controller import LWSController
from tests.conftest import api_client
from tests.e2e import audit
from tests.e2e.conftest import own_cluster
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
from tests.unit.test_target_lws import lws

GROUP_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
USER_MEMORY = 256 * 1024**3
H100 = "NVIDIA-H100-80GB-HBM3"
EXTRA = "kv_connector_extra_config"
# The shapes (tests/unit/test_target_lws.py) and the disk tier each is tested with.
SHAPES = {
    "worker-pp": {"type": "NVMe", "nvme": {"pool": POOL}},  # leader + worker, mp multi-node
    "worker-dp": {"type": "None"},  # llm-d modelservice: workerTemplate only, 8 ranks a pod
    "ray": {"type": "None"},  # a worker that only joins the leader's Ray cluster
}


@dataclass
class LWSStack:
    cluster: LocalCluster
    api: client.ApiClient
    lws: LWSController
    operator: OperatorProcess
    ns: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LWSStack]:
    logs = tmp_path_factory.mktemp("lws-controller")
    with own_cluster("lws") as cluster:
        controller = LWSController(cluster, logs)
        operator = OperatorProcess(cluster, logs / "operator.log")
        try:
            controller.start()
            api = api_client(cluster.admin_kubeconfig)
            apply_policy(api, POLICY)
            operator.start()
            yield LWSStack(cluster, api, controller, operator, new_namespace(api, "lws"))
        finally:
            operator.stop()
            controller.stop()
            print(f"logs: {logs}")


def user_lws(shape: str) -> dict[str, Any]:
    """The unit tests' LeaderWorkerSet of that shape, named by it, as a restricted user
    writes it (the namespace enforces Pod Security restricted)."""
    obj = lws(shape)
    obj["metadata"] = {"name": f"qwen-{shape}"}
    for key in ("leaderTemplate", "workerTemplate"):
        template = obj["spec"]["leaderWorkerTemplate"].get(key)
        if template is not None:
            template["metadata"]["labels"] = {"app": f"qwen-{shape}"}
            template["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": H100}  # kwok's nodes
            as_restricted_user(template)
    return obj


def _path(ns: str, name: str = "") -> str:
    base = f"/apis/{GROUP_VERSION}/namespaces/{ns}/leaderworkersets"
    return f"{base}/{name}" if name else base


def apply_as(api: client.ApiClient, ns: str, body: dict[str, Any], manager: str) -> None:
    """A forced server-side apply of the user's manifest by their tool (Helm, Argo CD)."""
    Kube(api).request(
        "PATCH",
        _path(ns, body["metadata"]["name"]),
        json.dumps({**body, "metadata": {**body["metadata"], "namespace": ns}}),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": manager, "force": "true"},
    )


def live(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], Kube(api).request("GET", _path(ns, name)))


def group_pods(api: client.ApiClient, ns: str, name: str) -> list[dict[str, Any]]:
    """The pods LWS built for the set (live ones), as dicts."""
    found = Kube(api).request(
        "GET", f"/api/v1/namespaces/{ns}/pods", query={"labelSelector": f"{LWS_NAME_LABEL}={name}"}
    )
    return [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]


def container(pod: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod["spec"]["containers"] if c["name"] == "vllm")
    return found


def _expand(word: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of a command or args word ($$ escapes)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        word,
    )


def command_line(ctr: dict[str, Any]) -> list[str]:
    env = {e["name"]: e["value"] for e in ctr.get("env") or [] if "value" in e}
    return [_expand(w, env) for w in [*(ctr.get("command") or []), *(ctr.get("args") or [])]]


def vllm_argv(ctr: dict[str, Any]) -> list[str]:
    """The words vLLM gets: the container's command line run with a stub `vllm` first on PATH
    that records its argv."""
    with tempfile.TemporaryDirectory(prefix="lws-vllm-") as tmp:
        stub = Path(tmp) / "vllm"
        stub.write_text(
            f"#!{sys.executable}\n"
            "import json, os, sys\n"
            "open(os.environ['STUB_VLLM_ARGV'], 'w').write(json.dumps(sys.argv[1:]))\n"
        )
        stub.chmod(0o755)
        argv_file = Path(tmp) / "argv.json"
        env = {"PATH": f"{tmp}:/usr/bin:/bin", "STUB_VLLM_ARGV": str(argv_file)}
        proc = subprocess.run(
            command_line(ctr), env=env, cwd=tmp, capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0 and argv_file.exists(), proc.stderr[-3000:]
        argv: list[str] = json.loads(argv_file.read_text())
        return argv


def kv_config(argv: list[str]) -> Any:
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == KV_FLAG]
    return json.loads(values[-1]) if values else None


def _role(pod: dict[str, Any]) -> str:
    """leader or worker: LWS's worker-index label is 0 on the leader."""
    return (
        "leader"
        if pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
        else "worker"
    )


def carries(pod: dict[str, Any], memory: int) -> bool:
    limits = container(pod).get("resources", {}).get("limits", {})
    return "memory" in limits and quantity_to_bytes(limits["memory"]) == memory


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_pods_lws_builds_carry_the_tier(stack: LWSStack, shape: str) -> None:
    api, ns = stack.api, stack.ns
    user = user_lws(shape)
    name = user["metadata"]["name"]
    apply_as(api, ns, user, "helm")
    create_tier(
        api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"apiVersion": GROUP_VERSION, "kind": "LeaderWorkerSet", "name": name},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 16},
            "disk": SHAPES[shape],
            "probe": {"enabled": False},
        },
    )
    tier = wait_condition(api, ns, name, "Ready", "True", timeout=120)
    (role,) = tier["status"]["plan"]["roles"]
    cpu = tier["status"]["sizing"]["cpuBytesToUse"]
    memory = USER_MEMORY + role["podMemoryBytes"]
    size = user["spec"]["leaderWorkerTemplate"]["size"]

    def rolled_out() -> list[dict[str, Any]]:
        pods = group_pods(api, ns, name)
        ok = len(pods) == size and all(carries(p, memory) for p in pods)
        return pods if ok else []

    pods = eventually(rolled_out, 120, f"the {size} pods LWS builds for {name}, with the tier")
    # LWS's controller built them: one group, the leader and its workers, its env in them.
    assert {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] for p in pods} == {
        "0"
    }
    for pod in pods:
        ctr = container(pod)
        assert {e["name"] for e in ctr["env"]} >= {"LWS_LEADER_ADDRESS", "HF_HOME"}
        template_key = (
            "leaderTemplate"
            if _role(pod) == "leader" and "leaderTemplate" in user["spec"]["leaderWorkerTemplate"]
            else "workerTemplate"
        )
        mine = user["spec"]["leaderWorkerTemplate"][template_key]["spec"]["containers"][0]
        if shape == "ray" and _role(pod) == "worker":
            # It runs no vLLM command line: its own command, untouched.
            assert command_line(ctr) == command_line(mine | {"env": ctr["env"]})
            assert KV_FLAG not in ctr.get("args", [])
        else:
            # vLLM's final argv: the user's command line (the kubelet's expansion of LWS's
            # env in it) first, then kvtier's flag with the tier's cpu_bytes_to_use.
            argv = vllm_argv(ctr)
            users = command_line(mine | {"env": ctr["env"]})[1:]
            assert argv[: len(users)] == users
            assert argv[len(users)] == KV_FLAG
            assert kv_config(argv)[EXTRA]["cpu_bytes_to_use"] == cpu
        # One /dev/shm mount, a memory emptyDir of kvtier's per-pod size (vLLM 0.33: the CPU
        # tier lives there).
        shm = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        assert len(shm) == 1
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == shm[0]["name"])
        assert volume["emptyDir"]["medium"] == "Memory"
        assert quantity_to_bytes(volume["emptyDir"]["sizeLimit"]) == role["shmBytes"]
        assert "/data" in {m["mountPath"] for m in ctr["volumeMounts"]}
        if SHAPES[shape]["type"] == "NVMe":
            disk = next(m for m in ctr["volumeMounts"] if m["mountPath"] == "/mnt/kv-cache")
            claim = next(v for v in pod["spec"]["volumes"] if v["name"] == disk["name"])
            assert "ephemeral" in claim  # each pod its own claim of the pool
    if shape == "worker-pp":  # each pod holds one pipeline stage of the engine's tier
        assert role["cpuBytesPerPod"] == -(-cpu // 2)
    if shape == "worker-dp":  # each pod runs 8 of the 16 data-parallel engines
        assert role["enginesPerPod"] == 8 and role["cpuBytesPerPod"] == 8 * cpu


def test_kvtiers_own_leaderworkerset_is_never_a_target(stack: LWSStack) -> None:
    api, ns = stack.api, stack.ns
    own = user_lws("single")
    own["metadata"] = {"name": "kvtier-own", "labels": {"app.kubernetes.io/managed-by": "kvtier"}}
    apply_as(api, ns, own, "helm")
    create_tier(
        api,
        ns,
        "own",
        {
            "mode": "Apply",
            "targetRef": {
                "apiVersion": GROUP_VERSION,
                "kind": "LeaderWorkerSet",
                "name": "kvtier-own",
            },
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 16},
            "disk": {"type": "None"},
        },
    )
    tier = wait_condition(api, ns, "own", "TargetFound", "False", timeout=60)
    found = next(c for c in tier["status"]["conditions"] if c["type"] == "TargetFound")
    assert "never a model server" in found["message"]
    assert "kvcache.io/applied" not in (
        live(api, ns, "kvtier-own")["metadata"].get("annotations") or {}
    )


def test_argo_cd_syncs_keep_the_users_fields_without_a_write(stack: LWSStack) -> None:
    """Argo CD self-heal with RespectIgnoreDifferences and deploy/argocd's ignoreDifferences
    for LeaderWorkerSets: each sync carries the live values of kvtier's fields, so it changes
    nothing and kvtier writes nothing back."""
    api, ns = stack.api, stack.ns
    for shape in ("worker-pp", "ray"):
        user = user_lws(shape)
        name = user["metadata"]["name"]
        before = live(api, ns, name)
        start = time.time()
        for _ in range(5):
            apply_as(api, ns, respecting_ignored(user, live(api, ns, name)), "argocd-controller")
        stack.operator.wait_resyncs()  # what the syncs left is looked at again, twice
        after = live(api, ns, name)
        assert after["metadata"]["generation"] == before["metadata"]["generation"], shape
        assert after["spec"] == before["spec"], shape
        writes = audit.writes(stack.cluster.audit_log, since=start, namespace=ns)
        assert sum(n for (_, res), n in writes.items() if res == "leaderworkersets") == 0


def test_no_write_once_settled_over_two_resyncs(stack: LWSStack) -> None:
    for shape in SHAPES:
        wait_condition(stack.api, stack.ns, user_lws(shape)["metadata"]["name"], "Ready", "True")
    names: list[str] = []
    writes = audit.idle_writes(
        stack.cluster.audit_log, stack.operator, names=names, namespace=stack.ns
    )
    assert sum(writes.values()) == 0, names


@pytest.mark.parametrize("shape", list(SHAPES))
def test_deleting_the_tier_gives_the_users_templates_back(stack: LWSStack, shape: str) -> None:
    api, ns = stack.api, stack.ns
    user = user_lws(shape)
    name = user["metadata"]["name"]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    back = eventually(
        lambda: (
            found
            if "kvcache.io/applied"
            not in ((found := live(api, ns, name))["metadata"].get("annotations") or {})
            else None
        ),
        60,
        "the tier's take-back",
    )
    mine = copy.deepcopy(user["spec"]["leaderWorkerTemplate"])
    templates = back["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key not in mine:
            assert key not in templates
            continue
        spec, users = templates[key]["spec"], mine[key]["spec"]
        ctr, own = spec["containers"][0], users["containers"][0]
        for field in ("command", "args", "env", "volumeMounts"):
            assert ctr.get(field) == own.get(field), (key, field)
        assert ctr["resources"]["limits"]["memory"] == "256Gi"
        assert "requests" not in ctr["resources"] or "memory" not in ctr["resources"]["requests"]
        assert [v["name"] for v in spec["volumes"]] == ["models"]
        assert "initContainers" not in spec

    # LWS rolls the group back to the user's templates: no pod keeps kvtier's fields.
    def rolled_back() -> bool:
        pods = group_pods(api, ns, name)
        return len(pods) == mine["size"] and all(
            KV_FLAG not in container(p).get("args", [])
            and not any(v["name"].startswith("kvtier-") for v in p["spec"]["volumes"])
            for p in pods
        )

    eventually(rolled_back, 120, f"the pods of {name} without kvtier's fields")
