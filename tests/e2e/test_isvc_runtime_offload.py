"""kvtier on an InferenceService as KServe's real InferenceService controller builds its pod
from a ServingRuntime (issue Q): KServe v0.20.0's cmd/manager (Standard mode, its webhooks
and ClusterServingRuntimes, tests/e2e/kserve_isvc.py) and kvtier's operator under its
restricted identity on one local control plane. Every assertion is on the Deployment KServe
writes and the pod kube-controller-manager builds from it, never on a pod built by hand:
vLLM's argv (the container's command run with stub programs) carries kvtier's
cpu_bytes_to_use, exactly one /dev/shm mount of kvtier's size, the memory kvtier sized above
the runtime's 2Gi limit, the disk mount, the user's own fields; a runtime whose script drops
the args gets no write and says why; after the tier's deletion the pod template is the
user's again; no kvtier write once settled.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from kubernetes import client

from kvtier.api.common import quantity_bytes
from tests.e2e import audit
from tests.e2e.conftest import inference_service
from tests.e2e.kserve_isvc import (
    KServeISVCStack,
    apply_runtime,
    container,
    create_isvc,
    get_isvc,
    plain_namespace,
    predictor_deployments,
    predictor_pods,
    vllm_argv,
)
from tests.e2e.kube_helpers import create_tier, eventually, get_tier, wait_condition
from tests.e2e.test_kserve_isvc_controller import deployments_written, multi_node
from tests.e2e.test_operator_apply import POOL
from tests.kserve_runtime_oracle import runtime_fixture

pytestmark = pytest.mark.timeout(900)

KV_FLAG = "--kv-transfer-config"
CONTAINER = "kserve-container"


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


def test_kserves_pod_carries_what_kvtier_sized(kserve_isvc_stack: KServeISVCStack) -> None:
    """KServe's own kserve-vllmserver ClusterServingRuntime: auto-selected by format; the pod
    KServe builds runs vLLM with kvtier's flag after the runtime's and the user's args, one
    /dev/shm (kvtier's, replacing the runtime's sizeless one) of kvtier's size, memory above
    the runtime's 2Gi limit, the disk mount; the user's env kept; 0 kvtier writes in 30 s;
    the tier's deletion gives KServe the user's service back, and KServe the user's pod."""
    stack = kserve_isvc_stack
    ns = plain_namespace(stack.api, "isvc-offload")
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
    # Settled: KServe keeps reconciling its service, kvtier writes nothing. Settled means the
    # rollout is over: the pods of the templates before kvtier's last write are gone, and
    # the local PVs their claims had bound are Available again (kvtier recreates a Released
    # one, test_nvme_storage_class.py).
    eventually(lambda: _rolled_out(stack, ns, name), 120, f"{name}'s rollout")
    eventually(lambda: _pvs_settled(stack), 60, "the tier's PVs Available or Bound")
    waited(stack, ns, name, "Ready", "True")
    since = time.time()
    time.sleep(30)
    names: list[str] = []
    writes = audit.writes(stack.cluster.audit_log, since=since, namespace=ns, names=names)
    assert sum(writes.values()) == 0, (names, _events(stack, ns))
    # The take-back: the user's service, and KServe's pod template as before the tier.
    client.CustomObjectsApi(stack.api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    eventually(lambda: _gone(stack, ns, name), 60, "the tier's deletion")
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec
    after = settled_template(stack, ns, name, "")
    mine, theirs = container(after["spec"], CONTAINER), container(before["spec"], CONTAINER)
    for key in ("args", "env", "resources", "volumeMounts"):
        assert mine.get(key) == theirs.get(key), key
    assert [v["name"] for v in after["spec"]["volumes"]] == [
        v["name"] for v in before["spec"]["volumes"]
    ]


def _rolled_out(stack: KServeISVCStack, ns: str, name: str) -> bool:
    deployment = predictor_deployments(stack.api, ns, name)[f"{name}-predictor"]
    status = deployment.get("status") or {}
    pods = predictor_pods(stack.api, ns, name)
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


def test_a_red_hat_runtime_names_its_vllm_release(kserve_isvc_stack: KServeISVCStack) -> None:
    """OpenShift AI's vllm-cuda-runtime in the namespace (picked before KServe's cluster
    runtime): its image's tag is the product's, so kvtier takes the release from the
    runtime's opendatahub.io/runtime-version, and says so when it cannot size for it; pinned
    with spec.model.vllmVersion, KServe's pod carries kvtier's flag."""
    stack = kserve_isvc_stack
    ns = plain_namespace(stack.api, "isvc-rh")
    apply_runtime(stack.api, ns, runtime_fixture("vllm-cuda-runtime"))
    name = "granite"
    create_isvc(stack.api, ns, isvc(name))
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


def test_a_runtime_that_drops_the_args_gets_no_write(kserve_isvc_stack: KServeISVCStack) -> None:
    """A runtime whose bash script execs vLLM with its own flags: KServe's pod would run vLLM
    without the service's args, so kvtier writes nothing and Applied=False FlagNotPassed
    names the runtime; the service and KServe's pod stay the user's."""
    stack = kserve_isvc_stack
    ns = plain_namespace(stack.api, "isvc-drop")
    runtime = runtime_fixture("vllm-cuda-runtime")
    runtime["metadata"]["name"] = "vllm-script"
    [ctr] = runtime["spec"]["containers"]
    ctr["command"] = [
        "bash",
        "-c",
        "exec python -m vllm.entrypoints.openai.api_server --port=8080 --model=/mnt/models",
    ]
    ctr["args"] = []
    apply_runtime(stack.api, ns, runtime)
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


def test_a_cephfs_tier_reaches_every_replica_kserve_runs(
    kserve_isvc_stack: KServeISVCStack,
) -> None:
    """A CephFS tier on a three-replica service: kvtier's shared claim (ReadWriteMany, the
    policy's class, owned by the tier) binds to the PV the test plays the provisioner with;
    KServe's Deployment carries it, and each of the three pods kube-controller-manager builds
    from it mounts the claim, runs vLLM with kvtier's 200Gi CPU tier after the user's args,
    keeps the user's env and gets the PYTHONHASHSEED the replicas share the tier by."""
    stack = kserve_isvc_stack
    ns = plain_namespace(stack.api, "isvc-cephfs")
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
    tier = waited(stack, ns, name, "Provisioned", "False", "ClaimPending")
    claim_name = next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    core = client.CoreV1Api(stack.api)
    claim = core.read_namespaced_persistent_volume_claim(claim_name, ns)
    assert claim.spec.access_modes == ["ReadWriteMany"]
    assert claim.spec.storage_class_name == "ocs-storagecluster-cephfs"
    assert claim.metadata.owner_references[0].kind == "KVCacheTier"
    # Play the CephFS provisioner: a matching PV; the controller-manager binds it.
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"cephfs-{ns}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "2Ti"},
                access_modes=["ReadWriteMany"],
                storage_class_name="ocs-storagecluster-cephfs",
                persistent_volume_reclaim_policy="Delete",
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"vol-{ns}"
                ),
            ),
        )
    )
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
) -> None:
    """A runtime whose bash script drops the args but evaluates VLLM_ADDITIONAL_ARGS into
    vLLM's command line (as KServe's llm-d templates do): kvtier puts its flag in that env
    of the service, after the runtime's own text; the pod KServe builds runs vLLM with the
    runtime's flag and kvtier's cpu_bytes_to_use, the service's args unchanged; the tier's
    deletion gives the user's service back."""
    stack = kserve_isvc_stack
    ns = plain_namespace(stack.api, "isvc-env")
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
    client.CustomObjectsApi(stack.api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    eventually(lambda: _gone(stack, ns, name), 60, "the tier's deletion")
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec


def test_a_multi_node_service_gets_the_tier_on_head_and_worker(
    kserve_isvc_stack: KServeISVCStack,
) -> None:
    """OpenShift AI's multi-node runtime (vllm serve with the mp executor; the worker's script
    forwards "$@") and a service of two pipeline stages: the head and worker Deployments
    KServe writes (v0.20.0 deletes the worker again, kserve/kserve#6113, so they are caught by
    a watch) each carry kvtier's memory above the runtime's 24Gi, exactly one /dev/shm of
    kvtier's size instead of the runtime's 12Gi, and kvtier's flag after the runtime's args."""
    stack = kserve_isvc_stack
    ns = plain_namespace(stack.api, "isvc-multi")
    runtime = runtime_fixture("vllm-multinode-runtime-mp")
    apply_runtime(stack.api, ns, runtime)
    name = "big"
    with deployments_written(stack.api, ns) as seen:
        create_isvc(stack.api, ns, multi_node(name))
        create_tier(
            stack.api,
            ns,
            name,
            tier_spec(
                name,
                model={"name": "llama-3.1-8b", "vllmVersion": "0.24.0"},
                workload={"averageContextTokens": 6000, "concurrentSessions": 8},  # 8192 max
            ),
        )
        waited(stack, ns, name, "Ready", "True")
        own = json.loads(
            get_isvc(stack.api, ns, name)["metadata"]["annotations"]["kvcache.io/applied"]
        )["kvTransferConfig"]

        def carries(deployment: str, ctr_name: str) -> bool:
            found = seen.get(deployment)
            if found is None:
                return False
            args = container(found["spec"]["template"]["spec"], ctr_name).get("args") or []
            return KV_FLAG in args and args[args.index(KV_FLAG) + 1] == own

        eventually(
            lambda: (
                carries(f"{name}-predictor", CONTAINER)
                and carries(f"{name}-predictor-worker", "worker-container")
            ),
            120,
            "KServe's head and worker Deployments with kvtier's flag",
        )
    for deployment, ctr_name in (
        (f"{name}-predictor", CONTAINER),
        (f"{name}-predictor-worker", "worker-container"),
    ):
        spec = seen[deployment]["spec"]["template"]["spec"]
        ctr = container(spec, ctr_name)
        mounts = [m for m in ctr["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        assert len(mounts) == 1, (deployment, mounts)
        [volume] = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
        assert quantity_bytes(volume["emptyDir"]["sizeLimit"]) != 12 * 1024**3, deployment
        assert quantity_bytes(ctr["resources"]["requests"]["memory"]) > 24 * 1024**3, deployment
        runtime_args = next(
            c
            for c in [*runtime["spec"]["containers"], *runtime["spec"]["workerSpec"]["containers"]]
            if c["name"] == ctr_name
        )["args"]
        assert ctr["args"].index(KV_FLAG) >= len(runtime_args), deployment  # after the runtime's
