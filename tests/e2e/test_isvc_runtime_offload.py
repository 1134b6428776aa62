"""kvtier on an InferenceService as KServe's real InferenceService controller builds its pod
from a ServingRuntime (issue Q): KServe v0.20.0's cmd/manager (Standard mode, its webhooks
and ClusterServingRuntimes, tests/e2e/kserve_isvc.py) and kvtier's operator under its
restricted identity on one local control plane. Every assertion is on the Deployment KServe
writes and the pod kube-controller-manager builds from it, never on a pod built by hand:
vLLM's argv (the container's command run with stub programs) carries kvtier's
cpu_bytes_to_use, exactly one /dev/shm mount of kvtier's size, the memory kvtier sized above
the runtime's 2Gi limit, the disk mount, the user's own fields; a runtime whose script drops
the args gets no write and says why; after the tier's deletion the pod template is the
user's again; no kvtier write once settled (over two of its periodic passes). Multi-node
services (spec.predictor.workerSpec) are checked on the head and the worker Deployment, which
KServe v0.20.0 deletes in the reconcile that wrote it (kserve/kserve#6113): a watch catches it.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from kvtier.api.common import quantity_bytes
from tests.e2e import audit
from tests.e2e.conftest import inference_service
from tests.e2e.kserve_isvc import (
    HF_SERVER,
    KServeISVCStack,
    apply_runtime,
    container,
    create_isvc,
    get_isvc,
    predictor_deployments,
    predictor_pods,
    vllm_argv,
)
from tests.e2e.kube_helpers import create_tier, eventually, get_tier, wait_condition
from tests.e2e.test_kserve_isvc_controller import USER_ARGS, deployments_written, multi_node
from tests.e2e.test_operator_apply import POOL
from tests.kserve_runtime_oracle import runtime_fixture

pytestmark = pytest.mark.timeout(900)

KV_FLAG = "--kv-transfer-config"
CONTAINER = "kserve-container"
WORKER = "worker-container"
WORKER_RECORD = "predictor.workerSpec"  # the worker template's key in kvtier's record
KV_MOUNT = "/mnt/kv-cache"


def isvc(name: str, **model: Any) -> dict[str, Any]:
    """A vLLM InferenceService as OpenShift AI's dashboard writes one, with the user's own
    env and a GPU, no memory of its own (the runtime's 2Gi limit applies)."""
    spec: dict[str, Any] = {
        "modelFormat": {"name": "vLLM"},
        "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct",
        "args": ["--max-model-len=32768"],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        **model,
    }
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"predictor": {"model": spec}},
    }


def template(stack: KServeISVCStack, ns: str, name: str) -> dict[str, Any]:
    """The predictor Deployment's pod template as KServe last wrote it."""

    def check() -> dict[str, Any] | None:
        found = predictor_deployments(stack.api, ns, name).get(f"{name}-predictor")
        return None if found is None else found["spec"]["template"]

    result: dict[str, Any] = eventually(check, 120, f"KServe's Deployment {name}-predictor")
    return result


def settled_template(stack: KServeISVCStack, ns: str, name: str, want: str) -> dict[str, Any]:
    """The template once KServe has turned the InferenceService as kvtier left it into one
    (KServe may still show the service as it was before kvtier's write): its container's args
    carry `want` (kvtier's flag value; none when `want` is empty) and its memory request is
    the service's."""

    def check() -> dict[str, Any] | None:
        found = template(stack, ns, name)
        ctr = container(found["spec"], CONTAINER)
        args = ctr.get("args") or []
        has = KV_FLAG in args and args[args.index(KV_FLAG) + 1] == want
        model = get_isvc(stack.api, ns, name)["spec"]["predictor"]["model"]
        request = (model.get("resources") or {}).get("requests", {}).get("memory")
        caught_up = request is None or ctr["resources"]["requests"].get("memory") == request
        return found if has == bool(want) and caught_up else None

    result: dict[str, Any] = eventually(check, 120, f"KServe's template of {name}")
    return result


def shm(tpl: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    ctr = container(tpl["spec"], CONTAINER)
    mounts = [m for m in ctr.get("volumeMounts") or [] if m["mountPath"] == "/dev/shm"]
    volume = next(
        (v for v in tpl["spec"].get("volumes") or [] if mounts and v["name"] == mounts[0]["name"]),
        None,
    )
    return mounts, volume


def waited(
    stack: KServeISVCStack,
    ns: str,
    name: str,
    ctype: str,
    status: str,
    reason: str | None = None,
    timeout: float = 180,
) -> dict[str, Any]:
    """wait_condition, failing with the tier's conditions (what it waits on) when it times out."""
    try:
        return wait_condition(stack.api, ns, name, ctype, status, reason, timeout=timeout)
    except AssertionError as exc:
        found = get_tier(stack.api, ns, name).get("status") or {}
        raise AssertionError(f"{exc}: {json.dumps(found.get('conditions'), indent=1)}") from None


def tier_spec(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "Apply",
        "targetRef": {"kind": "InferenceService", "name": name},
        "workload": {"averageContextTokens": 30000, "concurrentSessions": 8},
        "disk": {"type": "NVMe", "nvme": {"pool": POOL}},
        "probe": {"enabled": False},
        **extra,
    }


def test_kserves_pod_carries_what_kvtier_sized(
    kserve_isvc_stack: KServeISVCStack, kserve_namespace: Callable[[client.ApiClient, str], str]
) -> None:
    """KServe's own kserve-vllmserver ClusterServingRuntime: auto-selected by format; the pod
    KServe builds runs vLLM with kvtier's flag after the runtime's and the user's args, one
    /dev/shm (kvtier's, replacing the runtime's sizeless one) of kvtier's size, memory above
    the runtime's 2Gi limit, the disk mount; the user's env kept; once settled, 0 kvtier writes
    over two of its periodic passes; the tier's deletion gives KServe the user's service back,
    and KServe's pod template is the one it built before the tier."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-offload")
    name = "llama"
    create_isvc(stack.api, ns, isvc(name))
    before = template(stack, ns, name)
    user_spec = get_isvc(stack.api, ns, name)["spec"]
    create_tier(stack.api, ns, name, tier_spec(name))
    tier = waited(stack, ns, name, "Ready", "True")
    sizing = tier["status"]["sizing"]
    applied = json.loads(
        get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
    )
    tpl = settled_template(stack, ns, name, applied["kvTransferConfig"])
    ctr = container(tpl["spec"], CONTAINER)
    argv = vllm_argv(ctr)
    assert argv[:2] == ["python", "-m"]
    assert "--max-model-len=32768" in argv and "--port=8080" in argv
    config = json.loads(argv[argv.index(KV_FLAG) + 1])
    assert config["kv_connector_extra_config"]["cpu_bytes_to_use"] == sizing["cpuBytesToUse"]
    mounts, volume = shm(tpl)
    assert len(mounts) == 1 and volume is not None
    assert volume["emptyDir"]["medium"] == "Memory"
    # The whole CPU tier file and headroom (status.sizing names no /dev/shm size).
    assert quantity_bytes(volume["emptyDir"]["sizeLimit"]) > sizing["cpuBytesToUse"]
    request = quantity_bytes(ctr["resources"]["requests"]["memory"])
    limit = quantity_bytes(ctr["resources"]["limits"]["memory"])
    assert request >= sizing["cpuBytesToUse"] and limit >= request > 2 * 1024**3
    assert "/mnt/kv-cache" in {m["mountPath"] for m in ctr["volumeMounts"]}
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in ctr["env"]
    _assert_idle(stack, ns, name)
    _delete_tier(stack, ns, name)
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec
    _becomes(lambda: template(stack, ns, name), before, "KServe's template of the user's service")


def _rolled_out(stack: KServeISVCStack, ns: str, name: str) -> bool:
    """The head Deployment's rollout is over: one pod, of its current template (a multi-node
    service's worker pods, which KServe's deleted Deployment leaves for a while, not counted)."""
    head = f"{name}-predictor"
    deployment = predictor_deployments(stack.api, ns, name)[head]
    status = deployment.get("status") or {}
    pods = [
        p
        for p in predictor_pods(stack.api, ns, name)
        if p["metadata"]["labels"].get("app") == f"isvc.{head}"
    ]
    return (
        status.get("observedGeneration") == deployment["metadata"]["generation"]
        and status.get("updatedReplicas") == status.get("replicas") == 1
        and len(pods) == 1
    )


def _pvs_settled(stack: KServeISVCStack) -> bool:
    pvs = (
        client.CoreV1Api(stack.api)
        .list_persistent_volume(label_selector="app.kubernetes.io/managed-by=kvtier")
        .items
    )
    return bool(pvs) and all(str(pv.status.phase) in ("Available", "Bound") for pv in pvs)


def _events(stack: KServeISVCStack, ns: str) -> list[str]:
    found = client.CoreV1Api(stack.api).list_namespaced_event(ns).items
    return [f"{e.reason}: {e.message} (x{e.count})" for e in found]


def _gone(stack: KServeISVCStack, ns: str, name: str) -> bool:
    tiers = client.CustomObjectsApi(stack.api).list_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers"
    )["items"]
    return not any(t["metadata"]["name"] == name for t in tiers)


def _delete_tier(stack: KServeISVCStack, ns: str, name: str) -> None:
    client.CustomObjectsApi(stack.api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    eventually(lambda: _gone(stack, ns, name), 60, "the tier's deletion")


def _assert_idle(stack: KServeISVCStack, ns: str, name: str, local_pvs: bool = True) -> None:
    """Settled, kvtier writes nothing in the namespace over two of its periodic passes while
    KServe keeps reconciling the service. Settled means the rollout is over (the pods of the
    templates before kvtier's last write are gone), for an NVMe tier (`local_pvs`) the local
    PVs their claims had bound are Available again (kvtier recreates a Released one,
    test_nvme_storage_class.py), and the tier is Ready."""
    try:
        eventually(lambda: _rolled_out(stack, ns, name), 120, f"{name}'s rollout")
    except AssertionError as exc:
        head = predictor_deployments(stack.api, ns, name)[f"{name}-predictor"]
        pods = [
            (p["metadata"]["name"], p["metadata"]["labels"].get("app"), p.get("status"))
            for p in predictor_pods(stack.api, ns, name)
        ]
        raise AssertionError(f"{exc}: {head.get('status')}, pods {pods}") from None
    if local_pvs:
        eventually(lambda: _pvs_settled(stack), 60, "the tier's PVs Available or Bound")
    waited(stack, ns, name, "Ready", "True")
    names: list[str] = []
    writes = audit.idle_writes(stack.cluster.audit_log, stack.operator, names=names, namespace=ns)
    assert sum(writes.values()) == 0, (names, _events(stack, ns))


def _becomes(read: Callable[[], Any], want: Any, what: str, timeout: float = 120) -> None:
    """Wait until read() == want; on timeout fail with the last value beside `want`."""
    deadline = time.monotonic() + timeout
    while (got := read()) != want:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}:\n got  {json.dumps(got, sort_keys=True)}\n"
                f" want {json.dumps(want, sort_keys=True)}"
            )
        time.sleep(0.25)


def test_a_red_hat_runtime_names_its_vllm_release(
    kserve_isvc_stack: KServeISVCStack, kserve_namespace: Callable[[client.ApiClient, str], str]
) -> None:
    """OpenShift AI's vllm-cuda-runtime in the namespace (picked before KServe's cluster
    runtime): its image's tag is the product's, so kvtier takes the release from the
    runtime's opendatahub.io/runtime-version, and says so when it cannot size for it; pinned
    with spec.model.vllmVersion, KServe's pod carries kvtier's flag and one /dev/shm; once
    settled, 0 kvtier writes over two of its periodic passes; the tier's deletion gives the
    user's service back, and KServe's pod template is the one it built before the tier."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-rh")
    apply_runtime(stack.api, ns, runtime_fixture("vllm-cuda-runtime"))
    name = "granite"
    create_isvc(stack.api, ns, isvc(name))
    before = template(stack, ns, name)
    user_spec = get_isvc(stack.api, ns, name)["spec"]
    create_tier(stack.api, ns, name, tier_spec(name))
    tier = wait_condition(
        stack.api, ns, name, "Sized", "False", "UnsupportedVLLMVersion", timeout=120
    )
    sized = next(c for c in tier["status"]["conditions"] if c["type"] == "Sized")
    assert "the target's image is vLLM 0.21.0" in sized["message"]
    assert "spec.model.vllmVersion" in sized["message"]
    tier = get_tier(stack.api, ns, name)
    spec = copy.deepcopy(tier["spec"])
    spec.setdefault("model", {})["vllmVersion"] = "0.24.0"
    client.CustomObjectsApi(stack.api).patch_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name, {"spec": {"model": spec["model"]}}
    )
    tier = waited(stack, ns, name, "Ready", "True")
    applied = json.loads(
        get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
    )
    tpl = settled_template(stack, ns, name, applied["kvTransferConfig"])
    ctr = container(tpl["spec"], CONTAINER)
    assert ctr["image"] == runtime_fixture("vllm-cuda-runtime")["spec"]["containers"][0]["image"]
    config = json.loads(vllm_argv(ctr)[vllm_argv(ctr).index(KV_FLAG) + 1])
    assert (
        config["kv_connector_extra_config"]["cpu_bytes_to_use"]
        == tier["status"]["sizing"]["cpuBytesToUse"]
    )
    assert len(shm(tpl)[0]) == 1
    _assert_idle(stack, ns, name)
    _delete_tier(stack, ns, name)
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec
    _becomes(lambda: template(stack, ns, name), before, "KServe's template of the user's service")


def args_dropping_runtime(name: str) -> dict[str, Any]:
    """OpenShift AI's vllm-cuda-runtime with a bash script that execs vLLM with its own flags
    and never passes the container's args on."""
    runtime = runtime_fixture("vllm-cuda-runtime")
    runtime["metadata"]["name"] = name
    [ctr] = runtime["spec"]["containers"]
    ctr["command"] = [
        "bash",
        "-c",
        "exec python -m vllm.entrypoints.openai.api_server --port=8080 --model=/mnt/models",
    ]
    ctr["args"] = []
    return runtime


def test_a_runtime_that_drops_the_args_gets_no_write(
    kserve_isvc_stack: KServeISVCStack, kserve_namespace: Callable[[client.ApiClient, str], str]
) -> None:
    """A runtime whose bash script execs vLLM with its own flags: KServe's pod would run vLLM
    without the service's args, so kvtier writes nothing and Applied=False FlagNotPassed
    names the runtime; the service and KServe's pod stay the user's."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-drop")
    apply_runtime(stack.api, ns, args_dropping_runtime("vllm-script"))
    name = "scripted"
    create_isvc(stack.api, ns, isvc(name, runtime="vllm-script"))
    before = template(stack, ns, name)
    user_spec = get_isvc(stack.api, ns, name)["spec"]
    create_tier(stack.api, ns, name, tier_spec(name, model={"vllmVersion": "0.24.0"}))
    tier = waited(stack, ns, name, "Applied", "False", "FlagNotPassed", timeout=120)
    applied = next(c for c in tier["status"]["conditions"] if c["type"] == "Applied")
    assert "ServingRuntime vllm-script" in applied["message"]
    ready = next(c for c in tier["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec
    assert container(template(stack, ns, name)["spec"], CONTAINER) == container(
        before["spec"], CONTAINER
    )


def _play_cephfs_provisioner(stack: KServeISVCStack, ns: str, name: str, size: str) -> str:
    """Once the tier waits for its CephFS claim (Provisioned=False ClaimPending), a matching
    PV, as the CephFS provisioner would make it; the controller-manager binds it. The claim's
    name."""
    tier = waited(stack, ns, name, "Provisioned", "False", "ClaimPending")
    claim: str = next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    client.CoreV1Api(stack.api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"cephfs-{ns}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": size},
                access_modes=["ReadWriteMany"],
                storage_class_name="ocs-storagecluster-cephfs",
                persistent_volume_reclaim_policy="Delete",
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"vol-{ns}"
                ),
            ),
        )
    )
    return claim


def test_a_cephfs_tier_reaches_every_replica_kserve_runs(
    kserve_isvc_stack: KServeISVCStack,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """A CephFS tier on a three-replica service: kvtier's shared claim (ReadWriteMany, the
    policy's class, owned by the tier) binds to the PV the test plays the provisioner with;
    KServe's Deployment carries it, and each of the three pods kube-controller-manager builds
    from it mounts the claim, runs vLLM with kvtier's 200Gi CPU tier after the user's args,
    keeps the user's env and gets the PYTHONHASHSEED the replicas share the tier by."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-cephfs")
    name = "llama-70b"
    user = inference_service(
        name,
        tp=4,
        model_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
        min_replicas=3,
        max_replicas=3,
    )
    create_isvc(stack.api, ns, user)
    create_tier(
        stack.api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": name},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
            "cpu": {"size": "200Gi"},
            "disk": {"type": "CephFS", "cephfs": {"size": "2Ti"}},
            "probe": {"enabled": False},
        },
    )
    claim_name = _play_cephfs_provisioner(stack, ns, name, "2Ti")
    claim = client.CoreV1Api(stack.api).read_namespaced_persistent_volume_claim(claim_name, ns)
    assert claim.spec.access_modes == ["ReadWriteMany"]
    assert claim.spec.storage_class_name == "ocs-storagecluster-cephfs"
    assert claim.metadata.owner_references[0].kind == "KVCacheTier"
    tier = waited(stack, ns, name, "Ready", "True", "Applied")
    cephfs = next(t for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    assert cephfs["ready"] is True and cephfs["capacityBytes"] == 2 * 1024**4

    applied = json.loads(
        get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
    )
    tpl = settled_template(stack, ns, name, applied["kvTransferConfig"])
    volumes = {v["name"]: v for v in tpl["spec"]["volumes"]}
    [claim_volume] = [
        n for n, v in volumes.items() if v.get("persistentVolumeClaim", {}).get("claimName")
    ]
    assert volumes[claim_volume]["persistentVolumeClaim"]["claimName"] == claim_name
    user_args = user["spec"]["predictor"]["model"]["args"]

    def running() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in predictor_pods(stack.api, ns, name)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
            and claim_volume in {v["name"] for v in p["spec"].get("volumes") or []}
        ]
        return pods if len(pods) == 3 else None

    pods: list[dict[str, Any]] = eventually(running, 180, "three Running pods with the claim")
    for pod in pods:
        assert pod["spec"]["nodeName"].startswith("gpu-node-")
        ctr = container(pod["spec"], CONTAINER)
        argv = vllm_argv(ctr, pod)
        flag = argv.index(KV_FLAG)
        for word in user_args:  # the user's args reach vLLM before kvtier's flag
            assert word in argv[:flag]
        extra = json.loads(argv[flag + 1])["kv_connector_extra_config"]
        assert extra["spec_name"] == "TieringOffloadingSpec"
        assert extra["cpu_bytes_to_use"] == 200 * 1024**3
        assert extra["secondary_tiers"][0]["type"] == "fs"
        env = {e["name"]: e.get("value") for e in ctr["env"]}
        assert env["HF_HUB_OFFLINE"] == "1" and env["PYTHONHASHSEED"]
        mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
        assert mounts["/mnt/kv-cache"] == claim_volume
        assert sum(m["mountPath"] == "/dev/shm" for m in ctr["volumeMounts"]) == 1
    seeds = {
        next(
            e["value"]
            for e in container(p["spec"], CONTAINER)["env"]
            if e["name"] == "PYTHONHASHSEED"
        )
        for p in pods
    }
    assert len(seeds) == 1  # one hash seed: the replicas find each other's blocks


def test_a_runtime_that_evaluates_vllm_additional_args_gets_the_flag_there(
    kserve_isvc_stack: KServeISVCStack,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """A runtime whose bash script drops the args but evaluates VLLM_ADDITIONAL_ARGS into
    vLLM's command line (as KServe's llm-d templates do): kvtier puts its flag in that env
    of the service, after the runtime's own text; the pod KServe builds runs vLLM with the
    runtime's flag and kvtier's cpu_bytes_to_use, the service's args unchanged; once settled,
    0 kvtier writes over two of its periodic passes; the tier's deletion gives the user's
    service back, and KServe's pod template is the one it built before the tier."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-env")
    runtime = runtime_fixture("vllm-cuda-runtime")
    runtime["metadata"]["name"] = "vllm-eval"
    [ctr] = runtime["spec"]["containers"]
    ctr["command"] = [
        "bash",
        "-c",
        'eval "exec python -m vllm.entrypoints.openai.api_server --port=8080 '
        '--model=/mnt/models ${VLLM_ADDITIONAL_ARGS}"',
    ]
    ctr["args"] = []
    ctr["env"] = [*ctr.get("env", []), {"name": "VLLM_ADDITIONAL_ARGS", "value": "--enforce-eager"}]
    apply_runtime(stack.api, ns, runtime)
    name = "evaluated"
    create_isvc(stack.api, ns, isvc(name, runtime="vllm-eval"))
    before = template(stack, ns, name)
    user_spec = get_isvc(stack.api, ns, name)["spec"]
    create_tier(stack.api, ns, name, tier_spec(name, model={"vllmVersion": "0.24.0"}))
    tier = waited(stack, ns, name, "Ready", "True")
    service = get_isvc(stack.api, ns, name)
    assert service["spec"]["predictor"]["model"]["args"] == user_spec["predictor"]["model"]["args"]
    own = json.loads(service["metadata"]["annotations"]["kvcache.io/applied"])["kvTransferConfig"]

    def with_flag() -> list[str] | None:
        ctr = container(template(stack, ns, name)["spec"], CONTAINER)
        argv = vllm_argv(ctr)
        return argv if KV_FLAG in argv and argv[argv.index(KV_FLAG) + 1] == own else None

    argv: list[str] = eventually(with_flag, 120, "KServe's pod running vLLM with kvtier's flag")
    assert "--enforce-eager" in argv[: argv.index(KV_FLAG)]  # the runtime's text first
    config = json.loads(argv[argv.index(KV_FLAG) + 1])
    assert (
        config["kv_connector_extra_config"]["cpu_bytes_to_use"]
        == tier["status"]["sizing"]["cpuBytesToUse"]
    )
    _assert_idle(stack, ns, name)
    _delete_tier(stack, ns, name)
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec
    _becomes(lambda: template(stack, ns, name), before, "KServe's template of the user's service")


def _stand_in(ns: str, deployment: str, ip: str) -> dict[str, Any]:
    """The fields of a pod of `deployment` its fieldRef env reads, for a template whose pods
    never run (KServe deletes the worker Deployment) or whose pod IP is not the point."""
    return {"metadata": {"name": f"{deployment}-0", "namespace": ns}, "status": {"podIP": ip}}


# The disk tier of a multi-node service is one shared CephFS claim: KServe v0.20.0 recreates
# and deletes the worker Deployment in a loop (kserve/kserve#6113), so per-pod NVMe claims
# would bind and release a local PV with every worker pod, and nothing would ever settle.
MULTI_NODE_TIER = {
    "model": {"name": "llama-3.1-8b", "vllmVersion": "0.24.0"},  # the service's pvc:// names none
    "workload": {"averageContextTokens": 6000, "concurrentSessions": 8},  # 8192 max
    "disk": {"type": "CephFS", "cephfs": {"size": "1Ti"}},
}


def _generationless(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    """A multi-node template with the service's generation taken out where KServe writes it,
    which every write of the service bumps: the label isvc.generation, and the head and worker
    Service names (HEAD_SVC, WORKER_SVC: <name>-head-<generation>, GetHeadServiceName in
    KServe's pkg/constants)."""
    text = re.sub(rf"\b{re.escape(name)}-(head|workers)-\d+\b", rf"{name}-\1-N", json.dumps(tpl))
    found: dict[str, Any] = json.loads(text)
    labels = found.get("metadata", {}).get("labels") or {}
    if "isvc.generation" in labels:
        labels["isvc.generation"] = "N"
    return found


def _models_claim(stack: KServeISVCStack, ns: str) -> None:
    """The claim `models` a multi-node service's pvc:// storageUri names (KServe allows no
    other protocol there but oci://), bound to a PV made for it, so that its pods schedule and
    the head's rollout can finish."""
    core = client.CoreV1Api(stack.api)
    pv = f"models-{ns}"
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=pv),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "100Gi"},
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                claim_ref=client.V1ObjectReference(namespace=ns, name="models"),
                csi=client.V1CSIPersistentVolumeSource(driver="models.example", volume_handle=pv),
            ),
        )
    )
    core.create_namespaced_persistent_volume_claim(
        ns,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="models"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=pv,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "100Gi"}),
            ),
        ),
    )


def _multi_node_offload(
    stack: KServeISVCStack, ns: str, name: str, service: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The service created, then a tier on it, Ready: the tier, the user's service as stored
    before the tier, and the head's and the worker's templates ({Deployment: template}) as
    KServe wrote them before the tier and once it caught up with kvtier's write (each
    container's memory request the one kvtier recorded). Both are caught by a watch: v0.20.0
    deletes the worker in the reconcile that wrote it (kserve/kserve#6113). Templates are
    _generationless."""
    head, worker = f"{name}-predictor", f"{name}-predictor-worker"
    _models_claim(stack, ns)
    with deployments_written(stack.api, ns) as seen:
        create_isvc(stack.api, ns, service)
        eventually(lambda: {head, worker} <= set(seen), 60, "KServe's head and worker")
        before = {d: _generationless(seen[d]["spec"]["template"], name) for d in (head, worker)}
    user = get_isvc(stack.api, ns, name)
    with deployments_written(stack.api, ns) as seen:
        create_tier(stack.api, ns, name, tier_spec(name, **MULTI_NODE_TIER))
        _play_cephfs_provisioner(stack, ns, name, "1Ti")
        tier = waited(stack, ns, name, "Ready", "True")
        record = json.loads(
            get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
        )
        wrote = {
            head: (CONTAINER, record["memoryRequest"]["applied"]),
            worker: (WORKER, record["pods"][WORKER_RECORD]["memoryRequest"]["applied"]),
        }

        def caught_up(deployment: str) -> bool:
            ctr_name, request = wrote[deployment]
            found = seen.get(deployment)
            if found is None:
                return False
            ctr = container(found["spec"]["template"]["spec"], ctr_name)
            return bool(quantity_bytes(ctr["resources"]["requests"]["memory"]) == request)

        eventually(
            lambda: caught_up(head) and caught_up(worker),
            120,
            "KServe's head and worker Deployments with the memory kvtier wrote",
        )
        sized = {d: _generationless(seen[d]["spec"]["template"], name) for d in (head, worker)}
    return tier, user, before, sized


def _assert_pod_sized(
    tpl: dict[str, Any],
    before: dict[str, Any],
    ctr_name: str,
    role: dict[str, Any],
    record: dict[str, Any],
) -> dict[str, Any]:
    """One template kvtier sized, against KServe's template of the user's service alone:
    exactly one /dev/shm (kvtier's mount replaces the runtime's: KServe merges mounts by
    mountPath), a memory emptyDir of the role's shmBytes; memory request and limit the
    user's (or the runtime's) plus the role's podMemoryBytes, as kvtier recorded them; the
    disk mounted; the user's env and volumes kept. The container."""
    spec, ctr = tpl["spec"], container(tpl["spec"], ctr_name)
    theirs = container(before["spec"], ctr_name)
    [mount] = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert quantity_bytes(volume["emptyDir"]["sizeLimit"]) == role["shmBytes"]
    for kind, key in (("requests", "memoryRequest"), ("limits", "memoryLimit")):
        got = quantity_bytes(ctr["resources"][kind]["memory"])
        users = quantity_bytes(theirs["resources"][kind]["memory"])
        assert got == users + role["podMemoryBytes"] == record[key]["applied"], kind
        others = {k: v for k, v in ctr["resources"][kind].items() if k != "memory"}
        assert others == {k: v for k, v in theirs["resources"][kind].items() if k != "memory"}
    assert KV_MOUNT in {m["mountPath"] for m in ctr["volumeMounts"]}
    lost = [e for e in theirs.get("env") or [] if e not in ctr.get("env", [])]
    assert not lost, (lost, ctr.get("env"))
    lost = [v for v in before["spec"]["volumes"] if v not in spec["volumes"]]
    assert not lost, (lost, spec["volumes"])
    return ctr


def _take_back(
    stack: KServeISVCStack,
    ns: str,
    name: str,
    before: dict[str, dict[str, Any]],
    user: dict[str, Any],
) -> None:
    """The tier deleted: KServe's head and worker templates (the worker caught by a watch)
    are the ones it built before the tier, and the service is the user's again."""
    with deployments_written(stack.api, ns) as seen:

        def written(deployment: str) -> Callable[[], Any]:
            def read() -> dict[str, Any] | None:
                found = seen.get(deployment)
                return None if found is None else _generationless(found["spec"]["template"], name)

            return read

        _delete_tier(stack, ns, name)
        for deployment, want in before.items():
            _becomes(
                written(deployment), want, f"KServe's {deployment} template of the user's service"
            )
    service = get_isvc(stack.api, ns, name)
    assert service["metadata"].get("annotations") == user["metadata"].get("annotations")
    # The worker container kvtier made goes whole (targets/inference_service.py).
    assert service["spec"] == user["spec"]


def test_a_multi_node_service_gets_the_tier_on_head_and_worker(
    kserve_isvc_stack: KServeISVCStack,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """OpenShift AI's multi-node runtime (vllm serve with the mp executor; the worker's script
    forwards "$@") and a service of two pipeline stages, its disk tier a shared CephFS claim
    (MULTI_NODE_TIER): in the head and worker Deployments KServe writes, vLLM's argv (each
    container's command run with stub programs) carries kvtier's flag with the role's
    cpu_bytes_to_use after the runtime's args (and the user's, on the head); exactly one
    /dev/shm, kvtier's memory emptyDir of the role's shmBytes in place of the runtime's 12Gi
    one; memory request and limit the service's plus the role's podMemoryBytes, as kvtier
    recorded them; the disk mount; the user's env, GPUs and volumes kept. Once settled, 0 kvtier
    writes over two of its periodic passes; after the tier's deletion both templates are the
    ones KServe built before the tier, and the service is the user's, without the worker
    container kvtier made."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-multi")
    apply_runtime(stack.api, ns, runtime_fixture("vllm-multinode-runtime-mp"))
    name = "big"
    tier, user, before, sized = _multi_node_offload(stack, ns, name, multi_node(name))
    [role] = tier["status"]["plan"]["roles"]
    assert (role["tensor"], role["pipeline"]) == (1, 2)
    record = json.loads(
        get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
    )
    own = record["kvTransferConfig"]
    head, worker = f"{name}-predictor", f"{name}-predictor-worker"
    pods = {
        head: (CONTAINER, record, "10.0.0.1"),
        worker: (WORKER, record["pods"][WORKER_RECORD], "10.0.0.2"),
    }
    for deployment, (ctr_name, kept, ip) in pods.items():
        ctr = _assert_pod_sized(sized[deployment], before[deployment], ctr_name, role, kept)
        theirs = container(before[deployment]["spec"], ctr_name)
        assert ctr["args"] == [*theirs["args"], KV_FLAG, own], deployment
        argv = vllm_argv(ctr, _stand_in(ns, deployment, ip))
        assert argv[:2] == ["vllm", "serve"], deployment
        flag = argv.index(KV_FLAG)
        config = json.loads(argv[flag + 1])
        assert config["kv_connector_extra_config"]["cpu_bytes_to_use"] == role["cpuBytesToUse"]
        assert {"--tensor-parallel-size=1", "--pipeline-parallel-size=2"} <= set(argv[:flag])
        if deployment == head:
            assert {"--node-rank=0", "--master-addr=10.0.0.1", *USER_ARGS} <= set(argv[:flag])
            assert {"name": "HF_HUB_OFFLINE", "value": "1"} in ctr["env"]
        else:
            assert "--headless" in argv[:flag] and argv[flag + 2 :] == ["--node-rank=1"]
    _assert_idle(stack, ns, name, local_pvs=False)
    _take_back(stack, ns, name, before, user)


def test_a_multi_node_runtime_that_drops_the_args_gets_no_write(
    kserve_isvc_stack: KServeISVCStack,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """OpenShift AI's multi-node runtime in its Ray shape (vllm-multinode-runtime: the head's
    bash script execs vLLM with its own flags and never passes the container's args on; a 12Gi
    memory /dev/shm on head and workers) on a two-stage service: Applied=False FlagNotPassed
    names the runtime and the fix, Ready=False says the same; over two of kvtier's periodic
    passes after the tier's creation the audit log holds no kvtier write to the
    InferenceService, and the service and KServe's head template stay the user's."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-ray")
    apply_runtime(stack.api, ns, runtime_fixture("vllm-multinode-runtime"))
    name = "ray"
    create_isvc(stack.api, ns, multi_node(name))
    before = template(stack, ns, name)
    user = get_isvc(stack.api, ns, name)
    since = time.time()
    create_tier(stack.api, ns, name, tier_spec(name, **MULTI_NODE_TIER))
    tier = waited(stack, ns, name, "Applied", "False", "FlagNotPassed", timeout=120)
    applied = next(c for c in tier["status"]["conditions"] if c["type"] == "Applied")
    assert "ServingRuntime vllm-multinode-runtime" in applied["message"]
    assert '"$@"' in applied["message"] and "VLLM_ADDITIONAL_ARGS" in applied["message"]
    stack.operator.wait_resyncs(2)
    tier = get_tier(stack.api, ns, name)
    conditions = {c["type"]: c for c in tier["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "False", conditions["Ready"]
    assert conditions["Ready"]["reason"] == conditions["Applied"]["reason"] == "FlagNotPassed"
    names: list[str] = []
    writes = audit.writes(stack.cluster.audit_log, since=since, namespace=ns, names=names)
    assert not [w for w in writes if w[1].startswith("inferenceservices")], names
    service = get_isvc(stack.api, ns, name)
    assert service["spec"] == user["spec"]
    assert service["metadata"].get("annotations") == user["metadata"].get("annotations")
    assert template(stack, ns, name) == before


def test_kserves_huggingface_multi_node_runtime_carries_the_tier(
    kserve_isvc_stack: KServeISVCStack,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:
    """KServe's own kserve-huggingfaceserver-multinode ClusterServingRuntime (its head's bash
    script starts the Hugging Face server with tensor and pipeline parallelism from the env
    TENSOR_PARALLEL_SIZE / PIPELINE_PARALLEL_SIZE and passes the container's args on with
    `$0 $@`; its Ray workers run no vLLM) on a two-stage service, its disk tier a shared CephFS
    claim: the head's command, run with stub programs, hands vLLM's argument parser the user's
    args and kvtier's flag with the role's cpu_bytes_to_use, and TP 1 / PP 2 from the env; head
    and worker each get exactly one /dev/shm, kvtier's of the role's shmBytes in place of the
    runtime's 3Gi one, memory request and limit the service's plus the role's podMemoryBytes,
    and the disk mount; the worker's args stay the runtime's. Once settled, 0 kvtier writes over
    two of its periodic passes; after the tier's deletion both templates are the ones KServe
    built before the tier, and the service is the user's, without the worker container
    kvtier made."""
    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "isvc-hf")
    name = "hf"
    service = multi_node(name)
    model = service["spec"]["predictor"]["model"]
    model["modelFormat"] = {"name": "huggingface"}
    model["runtime"] = "kserve-huggingfaceserver-multinode"
    tier, user, before, sized = _multi_node_offload(stack, ns, name, service)
    [role] = tier["status"]["plan"]["roles"]
    assert (role["tensor"], role["pipeline"]) == (1, 2)
    record = json.loads(
        get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
    )
    own = record["kvTransferConfig"]
    head, worker = f"{name}-predictor", f"{name}-predictor-worker"
    ctr = _assert_pod_sized(sized[head], before[head], CONTAINER, role, record)
    assert ctr["args"] == [*container(before[head]["spec"], CONTAINER)["args"], KV_FLAG, own]
    argv = vllm_argv(ctr, _stand_in(ns, head, "10.0.0.1"))
    assert argv[:3] == ["python", "-m", HF_SERVER]
    flag = argv.index(KV_FLAG)
    assert argv[flag + 1] == own and flag + 2 == len(argv)
    config = json.loads(argv[flag + 1])
    assert config["kv_connector_extra_config"]["cpu_bytes_to_use"] == role["cpuBytesToUse"]
    assert {"--tensor-parallel-size=1", "--pipeline-parallel-size=2", *USER_ARGS} <= set(
        argv[:flag]
    )
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in ctr["env"]
    worker_ctr = _assert_pod_sized(
        sized[worker], before[worker], WORKER, role, record["pods"][WORKER_RECORD]
    )
    assert worker_ctr.get("args") == container(before[worker]["spec"], WORKER).get("args")
    _assert_idle(stack, ns, name, local_pvs=False)
    _take_back(stack, ns, name, before, user)
