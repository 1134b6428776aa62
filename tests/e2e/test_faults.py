"""Fault injection on a real control plane of this module's own (real processes are killed,
nothing is mocked): the operator SIGKILLed mid-reconcile, kube-apiserver and etcd restarted,
two operator replicas, a GitOps writer re-applying every target, and the objects a tier
reads deleted and re-created in random order.

Sizes are CI-sized by default; KVTIER_FULL=1 runs the issue's full sizes (50 tiers, 20
kills, 5 apiserver restarts, 1,000 re-applies). KVTIER_FAULT_SEED replays a random run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kvtier.kube.rest import Kube
from kvtier.names.labels import MANAGED_BY, NVME_POOL, TIER_ID
from kvtier.names.objects import cephfs_claim_name, nvme_volume_name, tier_id
from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.policy.provisioning import covers
from localcluster import LocalCluster, fake_gpu_nodes
from tests.conftest import api_client
from tests.e2e import audit
from tests.e2e.conftest import (
    create_target,
    inference_service,
    llm_inference_service,
    own_cluster,
)
from tests.e2e.kube_helpers import (
    GROUP,
    VERSION,
    apply_policy,
    condition,
    create_tier,
    delete_policy,
    eventually,
    get_tier,
    new_namespace,
)
from tests.e2e.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
FULL = os.environ.get("KVTIER_FULL") == "1"
TIERS = 50 if FULL else 10
KILLS = 20 if FULL else 3
APISERVER_RESTARTS = 5 if FULL else 2
ETCD_RESTARTS = 1
REAPPLIES = 1000 if FULL else 100
CHURN_ROUNDS = 4 if FULL else 2
SEED = int(os.environ.get("KVTIER_FAULT_SEED") or time.time_ns() % 1_000_000)
# A SIGKILLed leader holds the Lease until it expires (15 s) before a new process acts.
CONVERGE_TIMEOUT = 240 if FULL else 150
# Twenty rounds of waiting out a Lease alone take about six minutes at full size.
pytestmark = pytest.mark.timeout(1800 if FULL else 600)

POOL = "fault-nvme"
POOL_LABEL = "kvtier-faults/nvme"
POOL_NODES = ("gpu-node-0", "gpu-node-1")  # a small pool: two PVs per NVMe tier
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": POOL,
            "mountPath": "/var/mnt/nvme",
            "nodeSelector": {POOL_LABEL: "true"},
            "capacityPerNode": "3Ti",
            "volumeSource": "Local",
        }
    ],
    "cephfs": {"storageClassName": "ocs-storagecluster-cephfs"},
}
CEPHFS_CLASS = "ocs-storagecluster-cephfs"
NEMOTRON = "hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
LLAMA = "hf://meta-llama/Llama-3.1-70B-Instruct"
GPT_OSS = "hf://openai/gpt-oss-120b"
PLURALS = {"InferenceService": "inferenceservices", "LLMInferenceService": "llminferenceservices"}
ARGO = "argocd-controller"
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
    "torch_dtype": "bfloat16",
}


# --- the module's own control plane and operator ------------------------------------------


@pytest.fixture(scope="module")
def fcluster() -> Iterator[LocalCluster]:
    """A control plane only this module uses: restarting its API server disturbs nobody."""
    with own_cluster("faults") as local:
        for node in POOL_NODES:
            local.kubectl("label", "node", node, f"{POOL_LABEL}=true", "--overwrite")
        print(f"fault-injection seed: {SEED} (KVTIER_FAULT_SEED)")
        yield local


@pytest.fixture(scope="module")
def fapi(fcluster: LocalCluster) -> client.ApiClient:
    api = api_client(fcluster.admin_kubeconfig)
    apply_policy(api, POLICY)
    return api


# The module's operators resync less often than other modules' (OperatorProcess's 5 s): its
# recovery-time bounds are measured while the periodic passes compete for the workers.
RESYNC_SECONDS = 15.0


class Operators:
    """The module's operator; tests kill it and start new ones. All share one log file."""

    def __init__(self, cluster: LocalCluster, log: Path) -> None:
        self.cluster = cluster
        self.log = log
        self.current: OperatorProcess | None = None
        self.extra: list[OperatorProcess] = []

    def start(self) -> OperatorProcess:
        self.current = OperatorProcess(
            self.cluster, self.log, resync_seconds=RESYNC_SECONDS
        ).start()
        return self.current

    def spawn(self) -> OperatorProcess:
        """One more replica next to the current one."""
        proc = OperatorProcess(self.cluster, self.log, resync_seconds=RESYNC_SECONDS).start()
        self.extra.append(proc)
        return proc

    @property
    def proc(self) -> OperatorProcess:
        assert self.current is not None
        return self.current

    def ensure(self) -> OperatorProcess:
        """The running operator; a new one if an earlier test left none (a failure)."""
        for proc in self.extra:
            proc.stop()
        self.extra.clear()
        if (
            self.current is None
            or self.current.proc is None
            or self.current.proc.poll() is not None
        ):
            return self.start()
        return self.current

    def kill(self) -> None:
        self.proc.stop(signal.SIGKILL)

    def stop_all(self) -> None:
        for proc in [*self.extra, *([self.current] if self.current else [])]:
            proc.stop()


@pytest.fixture(scope="module")
def operators(
    fcluster: LocalCluster, fapi: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operators]:
    log = tmp_path_factory.mktemp("faults") / "operator.log"
    ops = Operators(fcluster, log)
    ops.start()
    try:
        yield ops
    finally:
        ops.stop_all()
        print(f"fault operator log: {log}")


# --- tiers and what they own ---------------------------------------------------------------


@dataclass
class Fleet:
    """The tiers of the kill test, reused by the later tests."""

    ns: str
    kinds: dict[str, str] = field(default_factory=dict)  # tier name → nvme | cephfs | cpu
    targets: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # → (kind, ver, name)
    originals: dict[str, dict[str, Any]] = field(default_factory=dict)  # the user's manifests


def _tier_spec(kind: str, target_kind: str, target: str, cpu_gi: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mode": "Apply",
        "targetRef": {"kind": target_kind, "name": target},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
        "cpu": {"size": f"{cpu_gi}Gi"},
        # kwok never finishes a probe pod: the probe has its own e2e test (test_probe.py).
        "probe": {"enabled": False},
    }
    if kind == "nvme":
        spec["disk"] = {"type": "NVMe", "nvme": {"pool": POOL, "size": "1Ti"}}
    elif kind == "cephfs":
        spec["disk"] = {"type": "CephFS", "cephfs": {"size": "1Ti"}}
    else:
        spec["disk"] = {"type": "None"}
    return spec


def add_tier(api: client.ApiClient, fleet: Fleet, index: int) -> None:
    kind = ("nvme", "cephfs", "cpu")[index % 3]
    name = f"t{index:03d}"
    if kind == "nvme":
        body = llm_inference_service(f"{name}-srv", tp=8, model_uri=NEMOTRON)
    elif kind == "cephfs":
        body = inference_service(
            f"{name}-srv", tp=4, model_uri=LLAMA, min_replicas=2, max_replicas=2
        )
    else:
        body = llm_inference_service(
            f"{name}-srv",
            tp=2,
            model_uri=GPT_OSS,
            api_version="serving.kserve.io/v1alpha1",
        )
    create_target(api, fleet.ns, body)
    target_kind = body["kind"]
    spec = _tier_spec(kind, target_kind, f"{name}-srv", 64)
    spec["targetRef"]["apiVersion"] = body["apiVersion"]
    create_tier(api, fleet.ns, name, spec)
    fleet.kinds[name] = kind
    version = body["apiVersion"].split("/")[1]
    fleet.targets[name] = (target_kind, version, f"{name}-srv")
    fleet.originals[name] = body


def set_cpu(api: client.ApiClient, ns: str, name: str, gi: int) -> None:
    """A spec change that changes every write: sizing, target patch."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, "kvcachetiers", name, {"spec": {"cpu": {"size": f"{gi}Gi"}}}
    )


def get_target(api: client.ApiClient, ns: str, kind: str, version: str, name: str) -> Any:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", version, ns, PLURALS[kind], name
    )


def labelled(items: list[Any], ns: str) -> list[Any]:
    return [
        o
        for o in items
        if (o.metadata.labels or {}).get(MANAGED_BY) == "kvtier"
        and (o.metadata.labels or {}).get("kvcache.io/tier-namespace", ns) == ns
    ]


def provision_claims(api: client.ApiClient, ns: str) -> None:
    """Play the CephFS provisioner: a PV pre-bound to every pending kvtier claim."""
    core = client.CoreV1Api(api)
    for pvc in labelled(core.list_namespaced_persistent_volume_claim(ns).items, ns):
        if pvc.status.phase == "Bound" or pvc.metadata.deletion_timestamp:
            continue
        name = f"cephfs-{ns}-{pvc.metadata.name}"[:253]
        body = client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": pvc.spec.resources.requests["storage"]},
                access_modes=pvc.spec.access_modes,
                storage_class_name=CEPHFS_CLASS,
                persistent_volume_reclaim_policy="Delete",
                claim_ref=client.V1ObjectReference(
                    namespace=ns, name=pvc.metadata.name, uid=pvc.metadata.uid
                ),
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=name
                ),
            ),
        )
        try:
            core.create_persistent_volume(body)
        except ApiException as exc:
            if exc.status != 409:
                raise


def not_converged(api: client.ApiClient, ns: str, names: list[str]) -> list[str]:
    """Tiers not yet Ready=True/Applied for their current generation."""
    tiers = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, ns, "kvcachetiers"
    )["items"]
    by_name = {t["metadata"]["name"]: t for t in tiers}
    lagging = []
    for name in names:
        tier = by_name.get(name)
        ready = condition(tier, "Ready") if tier else None
        if (
            tier is None
            or (tier.get("status") or {}).get("observedGeneration")
            != tier["metadata"]["generation"]
            or not ready
            or (ready["status"], ready["reason"]) != ("True", "Applied")
        ):
            shown = f"{ready['reason']} {ready['message'][:300]}" if ready else "no status"
            lagging.append(f"{name}: {shown}")
    return lagging


def wait_converged(api: client.ApiClient, fleet: Fleet, timeout: float = CONVERGE_TIMEOUT) -> None:
    names = sorted(fleet.kinds)

    def check() -> bool:
        provision_claims(api, fleet.ns)
        return not not_converged(api, fleet.ns, names)

    try:
        eventually(check, timeout, f"{len(names)} tiers converged")
    except AssertionError:
        raise AssertionError(f"not converged: {not_converged(api, fleet.ns, names)}") from None


def assert_storage_exact(api: client.ApiClient, fleet: Fleet) -> None:
    """No duplicate or orphaned PV/PVC/Job: exactly what each tier needs, nothing else."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    ns = fleet.ns
    ids = {tier_id(ns, name): name for name in fleet.kinds}
    pvs = [
        pv
        for pv in core.list_persistent_volume(label_selector=f"{MANAGED_BY}=kvtier").items
        if (pv.metadata.labels or {}).get("kvcache.io/tier-namespace") == ns
    ]
    seen: dict[str, list[str]] = {}
    for pv in pvs:
        owner = ids.get(pv.metadata.labels.get(TIER_ID, ""))
        assert owner is not None, f"orphaned PV {pv.metadata.name}"
        assert fleet.kinds[owner] == "nvme", f"PV {pv.metadata.name} for non-NVMe tier {owner}"
        assert pv.metadata.labels.get(NVME_POOL) == POOL
        node = pv.spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values[0]
        assert pv.metadata.name == nvme_volume_name(ns, owner, node)
        seen.setdefault(owner, []).append(node)
    for name, kind in fleet.kinds.items():
        if kind == "nvme":
            assert sorted(seen.get(name, [])) == sorted(POOL_NODES), (name, seen.get(name))
    claims = labelled(core.list_namespaced_persistent_volume_claim(ns).items, ns)
    claim_owners = [ids.get((c.metadata.labels or {}).get(TIER_ID, "")) for c in claims]
    assert None not in claim_owners, f"orphaned claims {[c.metadata.name for c in claims]}"
    expected_claims = sorted(n for n, k in fleet.kinds.items() if k == "cephfs")
    assert sorted(str(o) for o in claim_owners) == expected_claims
    assert sorted(c.metadata.name for c in claims) == sorted(
        cephfs_claim_name(n) for n in expected_claims
    )
    jobs = labelled(batch.list_namespaced_job(ns).items, ns)
    job_owners = [ids.get((j.metadata.labels or {}).get(TIER_ID, "")) for j in jobs]
    assert None not in job_owners, f"orphaned Jobs {[j.metadata.name for j in jobs]}"
    active = [o for o, j in zip(job_owners, jobs, strict=True) if not j.status.completion_time]
    assert len(active) == len(set(active)), f"duplicate probe Jobs {active}"


def plan_body(tier: dict[str, Any]) -> dict[str, Any]:
    """The target patch kvtier applies for the tier's current plan (always the last action)."""
    body: dict[str, Any] = tier["status"]["plan"]["actions"][-1]["body"]
    return body


def assert_targets_fully_applied(api: client.ApiClient, fleet: Fleet) -> None:
    for name, (kind, version, target) in fleet.targets.items():
        tier = get_tier(api, fleet.ns, name)
        body = plan_body(tier)
        assert body["kind"] == kind and body["metadata"]["name"] == target
        assert body["apiVersion"] == f"serving.kserve.io/{version}"
        current = get_target(api, fleet.ns, kind, version, target)
        assert covers(current, body), f"{kind} {target} lacks part of kvtier's configuration"


def assert_no_half_applied(api: client.ApiClient, fleet: Fleet) -> None:
    """At any instant, a target carrying kvtier's configuration has its storage in place
    (the target patch is the last write)."""
    core = client.CoreV1Api(api)
    ns = fleet.ns
    pv_ids = {
        (pv.metadata.labels or {}).get(TIER_ID)
        for pv in core.list_persistent_volume(label_selector=f"{MANAGED_BY}=kvtier").items
    }
    claims = {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items}
    for name, (kind, version, target) in fleet.targets.items():
        obj = get_target(api, ns, kind, version, target)
        if APPLIED_ANNOTATION not in (obj["metadata"].get("annotations") or {}):
            continue
        if fleet.kinds[name] == "nvme":
            assert tier_id(ns, name) in pv_ids, f"{target} patched before its PVs exist"
        elif fleet.kinds[name] == "cephfs":
            volumes = obj["spec"]["predictor"].get("volumes") or []
            refs = [
                v["persistentVolumeClaim"]["claimName"]
                for v in volumes
                if "persistentVolumeClaim" in v
            ]
            assert refs and set(refs) <= claims, f"{target} points at missing claims {refs}"


def reconciles(proc: OperatorProcess) -> float:
    """kvtier_reconcile_total over all results (0 when the replica never reconciled)."""
    total = 0.0
    for line in proc.metrics().splitlines():
        if line.startswith("kvtier_reconcile_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_reconciling(proc: OperatorProcess, timeout: float = 60) -> None:
    eventually(lambda: reconciles(proc) > 0, timeout, "the operator reconciling")


def assert_alive(proc: OperatorProcess) -> None:
    assert proc.proc is not None and proc.proc.poll() is None, "operator process exited"
    assert proc.healthy(), "operator /healthz not OK"


@pytest.fixture(scope="module")
def fleet(fapi: client.ApiClient, operators: Operators) -> Fleet:
    return Fleet(new_namespace(fapi, "faults"))


# --- 1. SIGKILL at random points while the tiers reconcile ---------------------------------


def test_operator_sigkill_mid_reconcile(
    fapi: client.ApiClient, operators: Operators, fleet: Fleet
) -> None:
    rng = random.Random(SEED)
    operators.kill()  # every round starts an operator with work queued
    batches = [list(range(TIERS))[i::KILLS] for i in range(KILLS)]
    started = time.monotonic()
    kill_delays = []
    for round_, batch in enumerate(batches):
        for index in batch:
            add_tier(fapi, fleet, index)
        for name in rng.sample(sorted(fleet.kinds), k=min(len(fleet.kinds), 3)):
            set_cpu(fapi, fleet.ns, name, 64 + round_ + 1)
        proc = operators.start()
        # Acting starts once the Lease is this replica's; kill at a random point after that.
        wait_reconciling(proc)
        delay = rng.uniform(0.0, 2.5)
        kill_delays.append(round(delay, 2))
        time.sleep(delay)
        assert_alive(proc)
        operators.kill()
        assert_no_half_applied(fapi, fleet)
    operators.start()
    wait_converged(fapi, fleet)
    assert_storage_exact(fapi, fleet)
    assert_targets_fully_applied(fapi, fleet)
    assert_no_half_applied(fapi, fleet)
    print(
        f"{TIERS} tiers, {KILLS} SIGKILLs (after first reconcile + {kill_delays} s), "
        f"converged in {time.monotonic() - started:.0f}s"
    )


# --- 2. kube-apiserver and etcd restarts ----------------------------------------------------


def _restart(cluster: LocalCluster, name: str, sig: int, down_seconds: float) -> None:
    cluster.stop(name, sig)
    time.sleep(down_seconds)
    cluster.start(name)
    cluster._wait_apiserver()


def test_apiserver_and_etcd_restarts(
    fcluster: LocalCluster, fapi: client.ApiClient, operators: Operators, fleet: Fleet
) -> None:
    assert fleet.kinds, "needs the tiers of the kill test"
    rng = random.Random(SEED + 1)
    proc = operators.ensure()
    pid = proc.proc.pid if proc.proc else None
    restarts = [("kube-apiserver", i) for i in range(APISERVER_RESTARTS)] + [
        ("etcd", i) for i in range(ETCD_RESTARTS)
    ]
    cpu = 80
    for component, i in restarts:
        cpu += 1
        for name in sorted(fleet.kinds):  # every tier has work when the restart hits
            set_cpu(fapi, fleet.ns, name, cpu)
        time.sleep(rng.uniform(0.0, 1.5))
        sig = signal.SIGKILL if component == "kube-apiserver" and i % 2 else signal.SIGTERM
        started = time.monotonic()
        _restart(fcluster, component, sig, rng.uniform(1.0, 4.0))
        wait_converged(fapi, fleet)
        print(
            f"{component} restart {i + 1} ({signal.Signals(sig).name}): converged "
            f"{time.monotonic() - started:.0f}s after the stop"
        )
        assert_alive(proc)
        assert proc.proc is not None and proc.proc.pid == pid  # no manual restart
    assert_storage_exact(fapi, fleet)
    assert_targets_fully_applied(fapi, fleet)
    for name in fleet.kinds:
        sizing = get_tier(fapi, fleet.ns, name)["status"]["sizing"]
        assert sizing["cpuBytesToUse"] == cpu * 1024**3


# --- 3. two replicas: exactly one acts, the other takes over ---------------------------------


def _lease(api: client.ApiClient) -> Any:
    return client.CoordinationV1Api(api).read_namespaced_lease(
        "kvtier-operator", os.environ.get("KVTIER_NAMESPACE", "kvtier-system")
    )


def leading(proc: OperatorProcess) -> bool:
    """kvtier_leader: whether the replica acts."""
    return any(line == "kvtier_leader 1.0" for line in proc.metrics().splitlines())


def watch_leaders(procs: tuple[OperatorProcess, ...], seconds: float) -> set[int]:
    """Sample both replicas' kvtier_leader for `seconds`; the number acting at each sample."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.add(sum(leading(p) for p in procs))
        time.sleep(0.2)
    return seen


def test_two_replicas_one_leader_and_failover(
    fcluster: LocalCluster, fapi: client.ApiClient, operators: Operators, fleet: Fleet
) -> None:
    first = operators.ensure()
    wait_reconciling(first)
    eventually(lambda: leading(first), 30, "the replica acting")
    second = operators.spawn()
    lease = eventually(lambda: _lease(fapi).spec.holder_identity, 30, "a Lease holder")
    assert lease
    # New work: only the leader may reconcile it.
    name = "ha-a"
    add_named(fapi, fleet, name, 0)
    wait_converged(fapi, fleet)
    counts = {first: reconciles(first), second: reconciles(second)}
    acting = [p for p, n in counts.items() if n > 0]
    # `first` has reconciled since its start; a fresh replica must stay idle.
    assert acting == [first], f"reconciles per replica: {list(counts.values())}"
    holder = _lease(fapi).spec.holder_identity
    pids = {p: p.proc.pid for p in (first, second) if p.proc}
    assert f"-{pids[first]}-" in f"-{holder}-" or all(
        f"-{pid}-" not in f"-{holder}-" for pid in pids.values()
    ), f"Lease held by {holder}, leader pid {pids[first]}"
    time.sleep(6)  # a renewal period: the standby still does nothing
    assert reconciles(second) == 0
    assert not leading(second)

    # A stalled API server: the leader cannot renew, and must stop acting within its renew
    # deadline (10 s), before its 15 s Lease could pass to the standby. Never two at once.
    apiserver = int((fcluster.workdir / "pids" / "kube-apiserver.pid").read_text())
    os.kill(apiserver, signal.SIGSTOP)
    try:
        stalled = time.monotonic()
        eventually(lambda: not leading(first), 20, "the leader to stop acting")
        stepped = time.monotonic() - stalled
        during = watch_leaders((first, second), 4)
    finally:
        os.kill(apiserver, signal.SIGCONT)
    after = watch_leaders((first, second), 12)  # the Lease is taken again, by one replica
    assert stepped <= 12, f"the leader acted {stepped:.1f}s into the stall"
    assert during == {0}, f"replicas acting during the stall: {during}"
    assert max(after) == 1, f"replicas acting after the stall: {after}"
    leader = eventually(
        lambda: next((p for p in (first, second) if leading(p)), None), 30, "one leader again"
    )
    standby = second if leader is first else first
    print(f"API server stalled: the leader stopped acting after {stepped:.1f}s")

    before = reconciles(standby)
    killed = time.monotonic()
    leader.stop(signal.SIGKILL)  # no release: the standby must wait the Lease out
    add_named(fapi, fleet, "ha-b", 1)
    eventually(lambda: reconciles(standby) > before, 60, "the standby to take over")
    took = time.monotonic() - killed
    wait_converged(fapi, fleet)
    new_holder = _lease(fapi).spec.holder_identity
    assert new_holder and standby.proc and f"-{standby.proc.pid}-" in f"-{new_holder}-"
    assert took <= 30, f"failover took {took:.0f}s"
    print(f"failover after SIGKILL of the leader: {took:.1f}s; Lease → {new_holder}")
    # The survivor carries on as the module's operator.
    if standby in operators.extra:
        operators.extra.remove(standby)
    if leader in operators.extra:
        operators.extra.remove(leader)
    operators.current = standby
    assert_storage_exact(fapi, fleet)


def add_named(api: client.ApiClient, fleet: Fleet, name: str, variant: int) -> None:
    kind = ("nvme", "cpu")[variant]
    if kind == "nvme":
        body = llm_inference_service(f"{name}-srv", tp=8, model_uri=NEMOTRON)
    else:
        body = llm_inference_service(
            f"{name}-srv", tp=2, model_uri=GPT_OSS, api_version="serving.kserve.io/v1alpha1"
        )
    create_target(api, fleet.ns, body)
    spec = _tier_spec(kind, body["kind"], f"{name}-srv", 64)
    spec["targetRef"]["apiVersion"] = body["apiVersion"]
    create_tier(api, fleet.ns, name, spec)
    fleet.kinds[name] = kind
    fleet.targets[name] = (body["kind"], body["apiVersion"].split("/")[1], f"{name}-srv")
    fleet.originals[name] = body


# --- 4. a GitOps writer re-applies every target's original manifest --------------------------


def argo_apply(api: client.ApiClient, ns: str, body: dict[str, Any]) -> None:
    group, version = body["apiVersion"].split("/")
    path = f"/apis/{group}/{version}/namespaces/{ns}/{PLURALS[body['kind']]}"
    Kube(api).request(
        "PATCH",
        f"{path}/{body['metadata']['name']}",
        json.dumps({**body, "metadata": {**body["metadata"], "namespace": ns}}),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": ARGO, "force": "true"},
    )


def missing(current: Any, desired: Any, path: str = "") -> list[str]:
    """Paths of `desired` that `current` does not cover (for failure messages)."""
    if isinstance(desired, dict) and isinstance(current, dict):
        return [p for k, v in desired.items() for p in missing(current.get(k), v, f"{path}.{k}")]
    return [] if covers(current, desired) else [path]


class LossWatch:
    """Watches the targets; records how long kvtier's fields were missing each time."""

    def __init__(self, api: client.ApiClient, ns: str, bodies: dict[str, dict[str, Any]]):
        self.api = api
        self.ns = ns
        self.bodies = bodies  # target name → kvtier's apply body
        self.lost_since: dict[str, float] = {}
        self.losses: list[float] = []
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._run, args=(version, plural), daemon=True)
            for version, plural in (
                ("v1beta1", "inferenceservices"),
                ("v1alpha2", "llminferenceservices"),
            )
        ]
        self.lock = threading.Lock()

    def __enter__(self) -> LossWatch:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)

    def _run(self, version: str, plural: str) -> None:
        custom = client.CustomObjectsApi(self.api)
        try:
            while not self.stop.is_set():
                w = watch.Watch()  # type: ignore[no-untyped-call]
                for event in w.stream(  # type: ignore[no-untyped-call]
                    custom.list_namespaced_custom_object,
                    "serving.kserve.io",
                    version,
                    self.ns,
                    plural,
                    timeout_seconds=5,
                ):
                    self._observe(event["object"])
                    if self.stop.is_set():
                        w.stop()  # type: ignore[no-untyped-call]
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    def _observe(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        body = self.bodies.get(name)
        if body is None:
            return
        now = time.monotonic()
        with self.lock:
            # Both LLMInferenceService versions are one object (no conversion): the watch
            # shows the v1alpha2 view of a v1alpha1 target.
            if covers({**obj, "apiVersion": body["apiVersion"]}, body):
                since = self.lost_since.pop(name, None)
                if since is not None:
                    self.losses.append(now - since)
            else:
                self.lost_since.setdefault(name, now)


def _operator_writes(cluster: LocalCluster, since: float) -> dict[tuple[str, str], int]:
    counts = audit.writes(cluster.audit_log, since=since)
    return {k: v for k, v in counts.items() if k[1] != "leases"}


def test_gitops_writer_reapplies_without_a_write_war(
    fcluster: LocalCluster, fapi: client.ApiClient, operators: Operators, fleet: Fleet
) -> None:
    operators.ensure()
    if not fleet.kinds:  # run on its own
        for index in range(3):
            add_tier(fapi, fleet, index)
    wait_converged(fapi, fleet)
    tiers = {n: get_tier(fapi, fleet.ns, n) for n in fleet.kinds}
    bodies = {fleet.targets[n][2]: plan_body(t) for n, t in tiers.items()}
    names = sorted(fleet.targets)
    start = time.time()
    with LossWatch(fapi, fleet.ns, bodies) as losses:
        time.sleep(1)  # the watches are open
        for i in range(REAPPLIES):
            name = names[i % len(names)]
            argo_apply(fapi, fleet.ns, fleet.originals[name])
            time.sleep(0.02)
        written = time.time()
        wait_converged(fapi, fleet)
        try:
            eventually(lambda: not losses.lost_since, 30, "kvtier's fields back")
        except AssertionError:
            lost = {}
            for name, (kind, version, target) in fleet.targets.items():
                if target in losses.lost_since:
                    current = get_target(fapi, fleet.ns, kind, version, target)
                    lost[target] = (
                        missing(current, bodies[target]),
                        plan_body(get_tier(fapi, fleet.ns, name)) == bodies[target],
                    )
            raise AssertionError(
                f"kvtier's fields still missing (path, plan unchanged): {lost}"
            ) from None
        time.sleep(2)
    assert not losses.errors, losses.errors
    assert_targets_fully_applied(fapi, fleet)
    writes = _operator_writes(fcluster, start)
    target_writes = writes.get(("patch", "inferenceservices"), 0) + writes.get(
        ("patch", "llminferenceservices"), 0
    )
    total = sum(writes.values())
    # No write war: once the writer stops and kvtier has restored, kvtier is quiet, through
    # two of its periodic passes too.
    settled = time.time()
    operators.ensure().wait_resyncs()
    after = _operator_writes(fcluster, settled)
    assert not after, f"kvtier kept writing after the writer stopped: {after}"
    longest = max(losses.losses, default=0.0)
    median = statistics.median(losses.losses) if losses.losses else 0.0
    print(
        f"GitOps writer: {REAPPLIES} re-applies over {len(names)} targets in "
        f"{written - start:.0f}s; kvtier target writes {target_writes} "
        f"(ratio {target_writes / REAPPLIES:.2f}), all kvtier writes {total} "
        f"(ratio {total / REAPPLIES:.2f}: {dict(writes)}); fields lost {len(losses.losses)} "
        f"times, median {median:.2f}s, longest {longest:.2f}s"
    )
    # At most one restoring write per re-apply and way kvtier writes (the restore is the write
    # that follows a loss): an InferenceService takes two, the guarded JSON patch of its atomic
    # args and the apply of its memory, which the writer both takes back.
    ways = {"InferenceService": 2, "LLMInferenceService": 1}
    bound = sum(ways[fleet.targets[names[i % len(names)]][0]] for i in range(REAPPLIES))
    assert 1 <= target_writes <= bound, writes
    assert total <= 6 * REAPPLIES, writes
    # Lost for no longer than one reconcile: the restore follows the watch event at once.
    assert longest <= 10.0, f"kvtier's fields were missing for {longest:.1f}s"


# --- 5. target, policy, ConfigMap and a node deleted and re-created in random order ---------


CHURN_OBJECTS = ("target", "policy", "configmap", "node")


def _expected(present: set[str]) -> dict[str, tuple[str, str | None]]:
    """Conditions the tier must show for the objects present: type → (status, reason)."""
    if "target" not in present:
        return {"TargetFound": ("False", "TargetNotFound"), "Ready": ("False", None)}
    # Without the policy the tier's pool is unknown: that is the blocker Ready names (policy
    # before sizing, docs/troubleshooting.md), and sizing stops at the pool before the model.
    if "policy" not in present:
        return {
            "PolicyCompliant": ("False", "UnknownNVMePool"),
            "Sized": ("False", "NVMePoolNotFound"),
            "Ready": ("False", "UnknownNVMePool"),
        }
    if "configmap" not in present:
        return {"Sized": ("False", "ConfigMapNotFound"), "Ready": ("False", None)}
    return {"Ready": ("True", "Applied"), "Provisioned": ("True", "Provisioned")}


def test_objects_deleted_and_recreated_in_random_order(
    fcluster: LocalCluster, fapi: client.ApiClient, operators: Operators
) -> None:
    rng = random.Random(SEED + 2)
    proc = operators.ensure()
    pid = proc.proc.pid if proc.proc else None
    ns = new_namespace(fapi, "churn")
    core, custom = client.CoreV1Api(fapi), client.CustomObjectsApi(fapi)
    target = llm_inference_service("churn-srv", tp=8, model_uri=LLAMA)
    node_name = POOL_NODES[1]
    node_body = fake_gpu_nodes(int(node_name.rsplit("-", 1)[1]) + 1)[-1]
    node_body["metadata"]["labels"][POOL_LABEL] = "true"

    def create(obj: str) -> None:
        if obj == "target":
            create_target(fapi, ns, target)
        elif obj == "policy":
            apply_policy(fapi, POLICY)
        elif obj == "configmap":
            core.create_namespaced_config_map(
                ns,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name="churn-config"),
                    data={"config.json": json.dumps(LLAMA_CONFIG)},
                ),
            )
        else:
            fcluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(node_body))

    def delete(obj: str) -> None:
        if obj == "target":
            custom.delete_namespaced_custom_object(
                "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", "churn-srv"
            )
        elif obj == "policy":
            delete_policy(fapi)
        elif obj == "configmap":
            core.delete_namespaced_config_map("churn-config", ns)
        else:
            core.delete_node(node_name)

    for obj in ("target", "configmap"):
        create(obj)
    create_tier(
        fapi,
        ns,
        "churn",
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": "churn-srv"},
            "model": {"configMapRef": {"name": "churn-config", "key": "config.json"}},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
            "disk": {"type": "NVMe", "nvme": {"pool": POOL, "size": "1Ti"}},
            "probe": {"enabled": False},
        },
    )
    present = set(CHURN_OBJECTS)
    steps: list[str] = []
    log_start = operators.log.stat().st_size

    def settle() -> None:
        want = _expected(present)

        def check() -> bool:
            tier = get_tier(fapi, ns, "churn")
            status = tier.get("status") or {}
            if status.get("observedGeneration") != tier["metadata"]["generation"]:
                return False
            for ctype, (st, reason) in want.items():
                c = condition(tier, ctype)
                if not c or c["status"] != st or (reason and c["reason"] != reason):
                    return False
            if want["Ready"][0] == "True":
                pvs = core.list_persistent_volume(
                    label_selector=f"{TIER_ID}={tier_id(ns, 'churn')}"
                ).items
                nodes = sorted(
                    pv.spec.node_affinity.required.node_selector_terms[0]
                    .match_expressions[0]
                    .values[0]
                    for pv in pvs
                )
                pool_nodes = [n for n in POOL_NODES if n != node_name or "node" in present]
                return nodes == pool_nodes
            return True

        try:
            eventually(check, 120, f"conditions {want} after {steps}")
        except AssertionError:
            tier = get_tier(fapi, ns, "churn")
            shown = [
                (c["type"], c["status"], c["reason"], c["message"][:200])
                for c in (tier.get("status") or {}).get("conditions") or []
            ]
            pvs = core.list_persistent_volume(label_selector=f"{TIER_ID}={tier_id(ns, 'churn')}")
            raise AssertionError(
                f"after {steps}: want {want}; the tier shows {shown}, generation "
                f"{tier['metadata']['generation']}, observed "
                f"{(tier.get('status') or {}).get('observedGeneration')}; PVs "
                f"{[(pv.metadata.name, pv.status.phase) for pv in pvs.items]}"
            ) from None
        assert_alive(proc)

    settle()
    for _ in range(CHURN_ROUNDS):
        deletes = rng.sample(CHURN_OBJECTS, k=len(CHURN_OBJECTS))
        creates = rng.sample(CHURN_OBJECTS, k=len(CHURN_OBJECTS))
        # Any interleaving, as long as each object is deleted before it is re-created.
        order = _interleave(rng, deletes, creates)
        for obj, verb in order:
            (delete if verb == "delete" else create)(obj)
            (present.discard if verb == "delete" else present.add)(obj)
            steps.append(f"{verb} {obj}")
            settle()
    tier = get_tier(fapi, ns, "churn")
    body = plan_body(tier)
    assert covers(
        custom.get_namespaced_custom_object(
            "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", "churn-srv"
        ),
        body,
    )
    assert proc.proc is not None and proc.proc.pid == pid
    with operators.log.open("rb") as f:
        f.seek(log_start)
        assert b"Traceback" not in f.read(), "the operator logged a traceback"
    print(f"churn steps: {steps}")


def _interleave(
    rng: random.Random, deletes: list[str], creates: list[str]
) -> list[tuple[str, str]]:
    """A random order of all deletes and creates where each create follows its delete."""
    order: list[tuple[str, str]] = []
    waiting = list(deletes)
    deleted: list[str] = []
    todo = list(creates)
    while waiting or todo:
        ready = [c for c in todo if c in deleted]
        if waiting and (not ready or rng.random() < 0.5):
            obj = waiting.pop(0)
            deleted.append(obj)
            order.append((obj, "delete"))
        else:
            obj = rng.choice(ready)
            todo.remove(obj)
            order.append((obj, "create"))
    return order
