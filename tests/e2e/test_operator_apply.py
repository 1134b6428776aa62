"""Apply mode end to end on the real control plane with kwok GPU nodes, the operator running
under its restricted identity: storage provisioned, targets patched field by field, pods of
the patched servers scheduled and Running, GitOps re-applies survived, removal exact."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from kubernetes import client

from kvtier.api.common import quantity_bytes
from kvtier.kube.rest import Kube
from kvtier.names.labels import TIER_ID
from kvtier.names.objects import tier_id
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.conftest import create_target, inference_service, llm_inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    as_restricted_user,
    create_tier,
    events_for,
    eventually,
    exists,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

POOL = "local-nvme"
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": POOL,
            "mountPath": "/var/mnt/nvme",
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
            "volumeSource": "Local",
        }
    ],
    "cephfs": {"storageClassName": "ocs-storagecluster-cephfs"},
}
STUDY = {"averageContextTokens": 50000, "concurrentSessions": 64}
NEMOTRON = "hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
ARGO = "argocd-controller"


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "apply")


def _custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def get_target(api: client.ApiClient, ns: str, kind: str, name: str, version: str) -> Any:
    plural = {
        "InferenceService": "inferenceservices",
        "LLMInferenceService": "llminferenceservices",
    }
    return _custom(api).get_namespaced_custom_object(
        "serving.kserve.io", version, ns, plural[kind], name
    )


def argo_apply(api: client.ApiClient, ns: str, body: dict[str, Any]) -> None:
    """Re-apply the user's manifest as Argo CD self-heal does: its own manager, forced."""
    group, version = body["apiVersion"].split("/")
    plural = {
        "InferenceService": "inferenceservices",
        "LLMInferenceService": "llminferenceservices",
    }
    # The typed client has no apply verb; kvtier's own REST layer sends one.
    Kube(api).request(
        "PATCH",
        f"/apis/{group}/{version}/namespaces/{ns}/{plural[body['kind']]}/{body['metadata']['name']}",
        json.dumps({**body, "metadata": {**body["metadata"], "namespace": ns}}),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": ARGO, "force": "true"},
    )


def pod_from_llmisvc(target: dict[str, Any], name: str) -> dict[str, Any]:
    """Play the KServe controller: the pod it would run for a (patched) LLMInferenceService."""
    template = copy.deepcopy(target["spec"]["template"])
    offload = target["spec"].get("kvCacheOffloading") or {}
    for i, tier in enumerate(offload.get("secondary") or []):
        pvc = tier["fileSystem"]["pvc"]
        volume_name = f"kv-cache-secondary-{i}"  # KServe's name and path
        mount = f"/mnt/kv-cache-{i}"
        if "spec" in pvc:
            volume = {
                "name": volume_name,
                "ephemeral": {"volumeClaimTemplate": {"spec": pvc["spec"]}},
            }
        else:
            volume = {
                "name": volume_name,
                "persistentVolumeClaim": {"claimName": pvc["ref"]["name"]},
            }
        template.setdefault("volumes", []).append(volume)
        template["containers"][0].setdefault("volumeMounts", []).append(
            {"name": volume["name"], "mountPath": mount}
        )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": template}
    return as_restricted_user(pod)  # the namespace enforces Pod Security `restricted`


def wait_running(api: client.ApiClient, ns: str, name: str) -> client.V1Pod:
    core = client.CoreV1Api(api)
    pod: client.V1Pod = eventually(
        lambda: (p := core.read_namespaced_pod(name, ns)).status.phase == "Running" and p,
        timeout=90,
        what=f"pod {name} Running",
    )
    return pod


def test_nvme_tier_on_llmisvc_v1alpha2(admin_api: client.ApiClient, ns: str) -> None:
    target = create_target(
        admin_api, ns, llm_inference_service("nemotron-ultra", tp=8, model_uri=NEMOTRON)
    )
    create_tier(
        admin_api,
        ns,
        "nemotron",
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": "nemotron-ultra"},
            "workload": STUDY,
            "disk": {"type": "NVMe", "nvme": {"pool": POOL, "size": "2Ti"}},
            "probe": {"enabled": False},  # probing has tests of its own
        },
    )
    tier = wait_condition(admin_api, ns, "nemotron", "Ready", "True", "Applied", timeout=90)
    status = tier["status"]
    assert status["sizing"]["topology"] == "CPUAndNVMe"
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Provisioned"]["status"] == "True" and conds["Applied"]["status"] == "True"
    assert "kvcache.io/cleanup" in tier["metadata"]["finalizers"]

    core = client.CoreV1Api(admin_api)
    # The pool's class comes from the policy; one PV per eligible node, pinned to it.
    sc = client.StorageV1Api(admin_api).read_storage_class(f"kvtier-nvme-{POOL}")
    assert sc.provisioner == "kubernetes.io/no-provisioner"
    assert sc.volume_binding_mode == "WaitForFirstConsumer"
    pvs = [
        pv
        for pv in core.list_persistent_volume().items
        if (pv.metadata.labels or {}).get("kvcache.io/tier-namespace") == ns
    ]
    nodes = {
        n.metadata.name for n in core.list_node(label_selector="kvcache.io/local-nvme=true").items
    }
    pinned = {
        pv.spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values[0]
        for pv in pvs
    }
    assert pinned == nodes and len(pvs) == len(nodes)
    for pv in pvs:
        assert pv.spec.local.path == "/var/mnt/nvme" and pv.spec.host_path is None
        assert pv.spec.capacity["storage"] == "2Ti"

    # The target, field by field.
    patched = get_target(admin_api, ns, "LLMInferenceService", "nemotron-ultra", "v1alpha2")
    offload = patched["spec"]["kvCacheOffloading"]
    assert offload["cpu"] and offload["evictionPolicy"] == "lru"
    claim = offload["secondary"][0]["fileSystem"]["pvc"]["spec"]
    assert claim["storageClassName"] == f"kvtier-nvme-{POOL}"
    main = patched["spec"]["template"]["containers"][0]
    memory = main["resources"]["limits"]["memory"]
    sizing = status["sizing"]
    assert quantity_bytes(memory) > 256 * 1024**3  # the user's 256Gi plus the tier's share
    assert any(
        v.get("emptyDir", {}).get("medium") == "Memory"
        for v in patched["spec"]["template"]["volumes"]
    )
    assert sizing["cpuBytesToUse"] > 0
    assert target["spec"]["template"]["containers"][0]["image"] == main["image"]

    # Play KServe: the patched server's pod lands on a GPU node and binds that node's PV.
    core.create_namespaced_pod(ns, pod_from_llmisvc(patched, "nemotron-ultra-0"))  # type: ignore[arg-type]
    pod = wait_running(admin_api, ns, "nemotron-ultra-0")
    assert pod.spec.node_name.startswith("gpu-node-")
    bound = eventually(
        lambda: [
            pv
            for pv in core.list_persistent_volume().items
            if pv.status.phase == "Bound"
            and pv.spec.claim_ref
            and pv.spec.claim_ref.namespace == ns
        ],
        what="the pod's claim bound to a tier PV",
    )
    node_of_pv = (
        bound[0].spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values[0]
    )
    assert node_of_pv == pod.spec.node_name
    eventually(
        lambda: "Applied" in {e.reason for e in events_for(admin_api, ns, "nemotron")},
        what="an Applied event",
    )


def test_cephfs_tier_on_inference_service(admin_api: client.ApiClient, ns: str) -> None:
    """The CephFS tier the later tests of this module build on: its shared claim, bound to
    the PV the test plays the provisioner with, and the InferenceService field by field."""
    user = inference_service(
        "llama-70b",
        tp=4,
        model_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
        min_replicas=3,
        max_replicas=3,
    )
    create_target(admin_api, ns, user)
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "llama-70b"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
            "cpu": {"size": "200Gi"},
            "disk": {"type": "CephFS", "cephfs": {"size": "2Ti"}},
            "probe": {"enabled": False},
        },
    )
    tier = wait_condition(admin_api, ns, "llama", "Provisioned", "False", "ClaimPending")
    claim_name = next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    core = client.CoreV1Api(admin_api)
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
    tier = wait_condition(admin_api, ns, "llama", "Ready", "True", "Applied", timeout=90)
    cephfs = next(t for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    assert cephfs["ready"] is True and cephfs["capacityBytes"] == 2 * 1024**4

    patched = get_target(admin_api, ns, "InferenceService", "llama-70b", "v1beta1")
    model = patched["spec"]["predictor"]["model"]
    args = model["args"]
    assert args[:4] == user["spec"]["predictor"]["model"]["args"]  # the user's args first
    flag = args.index("--kv-transfer-config")
    config = json.loads(args[flag + 1])
    extra = config["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["cpu_bytes_to_use"] == 200 * 1024**3
    assert extra["secondary_tiers"][0]["type"] == "fs"
    env = {e["name"]: e.get("value") for e in model["env"]}
    assert env["HF_HUB_OFFLINE"] == "1"  # the user's env survives
    assert env["PYTHONHASHSEED"]  # three replicas share the tier
    mounts = {m["mountPath"] for m in model["volumeMounts"]}
    assert {"/dev/shm", "/mnt/kv-cache"} <= mounts
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in patched["spec"]["predictor"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == [claim_name]
    # The pods KServe builds from this: test_isvc_runtime_offload.py, with KServe's controller.


def test_llmisvc_v1alpha1_gets_additional_args(admin_api: client.ApiClient, ns: str) -> None:
    create_target(
        admin_api,
        ns,
        llm_inference_service(
            "gpt-oss",
            tp=2,
            replicas=2,
            model_uri="hf://openai/gpt-oss-120b",
            api_version="serving.kserve.io/v1alpha1",
        ),
    )
    create_tier(
        admin_api,
        ns,
        "gptoss",
        {
            "mode": "Apply",
            "targetRef": {
                "apiVersion": "serving.kserve.io/v1alpha1",
                "kind": "LLMInferenceService",
                "name": "gpt-oss",
            },
            "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
            "disk": {"type": "None"},
        },
    )
    wait_condition(admin_api, ns, "gptoss", "Ready", "True", "Applied", timeout=90)
    patched = get_target(admin_api, ns, "LLMInferenceService", "gpt-oss", "v1alpha1")
    main = patched["spec"]["template"]["containers"][0]
    extra = next(e["value"] for e in main["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS")
    assert extra.startswith("--kv-transfer-config '{") and extra.endswith("}'")
    config = json.loads(extra.split(" ", 1)[1].strip("'"))
    assert config["kv_connector"] == "OffloadingConnector"
    assert "kvCacheOffloading" not in patched["spec"]

    # Both versions are served, one is watched (the API server counts the watches, other
    # clients' too); a change the tier's own version shows is still seen, read through it.
    watches = llmisvc_watches(admin_api)
    assert watches.get("v1alpha2", 0) >= 1 and "v1alpha1" not in watches, watches
    _custom(admin_api).patch_namespaced_custom_object(
        "serving.kserve.io",
        "v1alpha1",
        ns,
        "llminferenceservices",
        "gpt-oss",
        {"spec": {"replicas": 3}},
    )
    eventually(
        lambda: (
            "3 replica(s)" in condition_message(get_tier(admin_api, ns, "gptoss"), "TargetFound")
        ),
        30,
        "the tier sees the new replica count",
    )


def llmisvc_watches(api: client.ApiClient) -> dict[str, int]:
    """Open LLMInferenceService watches by version, from kube-apiserver's own metrics."""
    _, url, headers, _, _ = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    text = api.call_api("GET", url, header_params=headers).read().decode()  # type: ignore[no-untyped-call]
    watches: dict[str, int] = {}
    for line in text.splitlines():
        if (
            line.startswith("apiserver_longrunning_requests{")
            and 'resource="llminferenceservices"' in line
            and 'verb="WATCH"' in line
        ):
            version = line.split('version="', 1)[1].split('"', 1)[0]
            count = int(float(line.rsplit(" ", 1)[1]))
            if count:
                watches[version] = watches.get(version, 0) + count
    return watches


def test_user_kv_transfer_config_is_a_conflict(admin_api: client.ApiClient, ns: str) -> None:
    own = inference_service("own-config", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct")
    own["spec"]["predictor"]["model"]["args"] += ["--kv-transfer-config", '{"kv_connector":"X"}']
    create_target(admin_api, ns, own)
    create_tier(
        admin_api,
        ns,
        "own",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "own-config"},
            "workload": STUDY,
            "disk": {"type": "None"},
        },
    )
    tier = wait_condition(admin_api, ns, "own", "Conflict", "True", "KVTransferConfigInUse")
    assert (
        "--kv-transfer-config"
        in {c["type"]: c for c in tier["status"]["conditions"]}["Conflict"]["message"]
    )
    untouched = get_target(admin_api, ns, "InferenceService", "own-config", "v1beta1")
    assert (
        untouched["spec"]["predictor"]["model"]["args"] == own["spec"]["predictor"]["model"]["args"]
    )


def test_argo_reapplies_do_not_start_a_write_war(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    user = inference_service(
        "llama-70b",
        tp=4,
        model_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
        min_replicas=3,
        max_replicas=3,
    )
    start = time.time()
    rounds = 50
    for _ in range(rounds):
        argo_apply(admin_api, ns, user)
        time.sleep(0.05)
    wait_condition(admin_api, ns, "llama", "Applied", "True", timeout=60)
    patched = eventually(
        lambda: (
            "--kv-transfer-config"
            in (t := get_target(admin_api, ns, "InferenceService", "llama-70b", "v1beta1"))["spec"][
                "predictor"
            ]["model"]["args"]
            and t
        ),
        what="kvtier's args restored",
    )
    assert (
        patched["spec"]["predictor"]["model"]["args"][:4]
        == user["spec"]["predictor"]["model"]["args"]
    )
    time.sleep(3)
    writes = audit.writes(cluster.audit_log, since=start)
    target_writes = writes[("patch", "inferenceservices")]
    # Each re-apply takes back the args (an atomic list) and the memory: at most one guarded
    # JSON patch and one apply restore them, and it stops when the re-applies stop.
    assert 1 <= target_writes <= 2 * rounds, writes
    # Settled: nothing more, not even on the operator's periodic passes.
    assert sum(audit.idle_writes(cluster.audit_log, operator, namespace=ns).values()) == 0
    print(f"argo re-applies: {rounds}, kvtier target writes: {target_writes}")


def test_native_fields_survive_argo_with_at_most_one_restoring_write_per_sync(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str
) -> None:
    user = llm_inference_service("nemotron-ultra", tp=8, model_uri=NEMOTRON)
    start = time.time()
    for _ in range(20):
        argo_apply(admin_api, ns, user)
    patched = get_target(admin_api, ns, "LLMInferenceService", "nemotron-ultra", "v1alpha2")
    assert "kvCacheOffloading" in patched["spec"]
    time.sleep(3)
    writes = audit.writes(cluster.audit_log, since=start)
    # Memory was owned by the user's manifest and re-taken by Argo: restored, nothing more.
    assert writes[("patch", "llminferenceservices")] <= 20


def test_deleting_the_tier_restores_the_users_manifest(
    admin_api: client.ApiClient, ns: str
) -> None:
    user = inference_service(
        "llama-70b",
        tp=4,
        model_uri="hf://meta-llama/Llama-3.1-70B-Instruct",
        min_replicas=3,
        max_replicas=3,
    )
    claim = next(
        t["claimName"]
        for t in get_tier(admin_api, ns, "llama")["status"]["tiers"]
        if t["name"] == "cephfs"
    )
    _custom(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "llama"
    )
    eventually(
        lambda: not exists(lambda: get_tier(admin_api, ns, "llama")),
        what="tier deleted (finalizer released)",
    )
    restored = get_target(admin_api, ns, "InferenceService", "llama-70b", "v1beta1")
    assert restored["spec"]["predictor"]["model"] == user["spec"]["predictor"]["model"]
    assert "volumes" not in restored["spec"]["predictor"]
    assert "kvcache.io/applied" not in (restored["metadata"].get("annotations") or {})
    core = client.CoreV1Api(admin_api)
    # The tier's claim goes with it (no pod mounts it here: KServe's pods are
    # test_isvc_runtime_offload.py's).
    eventually(
        lambda: not exists(lambda: core.read_namespaced_persistent_volume_claim(claim, ns)),
        what="the tier's claim gone",
    )


def test_switching_to_plan_takes_the_configuration_back(
    admin_api: client.ApiClient, ns: str
) -> None:
    _custom(admin_api).patch_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "nemotron", {"spec": {"mode": "Plan"}}
    )
    tier = wait_condition(admin_api, ns, "nemotron", "Ready", "True", "Planned", timeout=60)
    eventually(
        lambda: (
            "kvCacheOffloading"
            not in get_target(admin_api, ns, "LLMInferenceService", "nemotron-ultra", "v1alpha2")[
                "spec"
            ]
        ),
        what="native offload removed",
    )
    assert "kvcache.io/cleanup" not in (
        get_tier(admin_api, ns, "nemotron")["metadata"].get("finalizers") or []
    )
    assert tier["status"]["plan"]["actions"][-1]["kind"] == "LLMInferenceService"
    core = client.CoreV1Api(admin_api)
    eventually(
        lambda: (
            not [
                pv
                for pv in core.list_persistent_volume().items
                if (pv.metadata.labels or {}).get("kvcache.io/tier-namespace") == ns
                and pv.status.phase != "Bound"
            ]
        ),
        what="unbound tier PVs removed",
    )


def _cpu_only_tier(admin_api: client.ApiClient, ns: str, name: str) -> None:
    create_target(admin_api, ns, llm_inference_service(name, tp=8, model_uri=NEMOTRON))
    create_tier(
        admin_api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": name},
            "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
            "disk": {"type": "None"},
        },
    )
    tier = wait_condition(admin_api, ns, name, "Ready", "True", "Applied", timeout=60)
    assert "kvcache.io/cleanup" in tier["metadata"]["finalizers"]


def test_removal_does_not_block_when_the_target_is_gone(
    admin_api: client.ApiClient, ns: str
) -> None:
    _cpu_only_tier(admin_api, ns, "orphan")
    _custom(admin_api).delete_namespaced_custom_object(
        "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", "orphan"
    )
    wait_condition(admin_api, ns, "orphan", "TargetFound", "False", "TargetNotFound")
    _custom(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "orphan"
    )
    eventually(
        lambda: not exists(lambda: get_tier(admin_api, ns, "orphan")),
        what="the tier gone although its target was",
    )


def test_namespace_deletion_completes(admin_api: client.ApiClient, ns: str) -> None:
    doomed = new_namespace(admin_api, "doomed")
    _cpu_only_tier(admin_api, doomed, "gone")
    core = client.CoreV1Api(admin_api)
    core.delete_namespace(doomed)
    eventually(
        lambda: not exists(lambda: core.read_namespace(doomed)),
        timeout=90,
        what="the namespace with an Applied tier deleted",
    )


def test_two_tiers_on_one_target_never_fight(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    _cpu_only_tier(admin_api, ns, "shared")
    start = time.time()
    create_tier(
        admin_api,
        ns,
        "second",
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": "shared"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
            "disk": {"type": "None"},
        },
    )
    tier = wait_condition(admin_api, ns, "second", "Conflict", "True", "TargetClaimed")
    assert "KVCacheTier shared" in condition_message(tier, "Conflict")
    operator.wait_resyncs(2)  # the waiting tier writes nothing, on a periodic pass either
    writes = audit.writes(cluster.audit_log, since=start)
    assert writes[("patch", "llminferenceservices")] == 0, writes
    # The first tier goes: the waiting one takes the target over.
    _custom(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "shared"
    )
    wait_condition(admin_api, ns, "second", "Ready", "True", "Applied", timeout=60)


def condition_message(tier: dict[str, Any], ctype: str) -> str:
    return str({c["type"]: c for c in tier["status"]["conditions"]}[ctype]["message"])


@pytest.mark.parametrize("refusal", ["TargetClaimed", "CPUTierAboveLimit"])
def test_a_refused_nvme_tier_names_its_refusal_and_makes_no_volume(
    cluster: LocalCluster,
    admin_api: client.ApiClient,
    ns: str,
    refusal: str,
    operator: OperatorProcess,
) -> None:
    """Ready names the refusal, not local PVs that are never created (issue V, defect 2)."""
    name = f"refused-{refusal.lower()}"
    if refusal == "TargetClaimed":
        _cpu_only_tier(admin_api, ns, name)  # the older tier holds the target
        tier_name, cpu = f"{name}-nvme", {}
    else:
        create_target(admin_api, ns, llm_inference_service(name, tp=8, model_uri=NEMOTRON))
        tier_name, cpu = name, {"cpu": {"size": "8Ti"}}  # nodes have 2Ti
    start = time.time()
    create_tier(
        admin_api,
        ns,
        tier_name,
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": name},
            "workload": STUDY,
            "disk": {"type": "NVMe", "nvme": {"pool": POOL, "size": "2Ti"}},
            **cpu,
        },
    )
    ctype = "Conflict" if refusal == "TargetClaimed" else "PolicyCompliant"
    refused = "True" if refusal == "TargetClaimed" else "False"
    wait_condition(admin_api, ns, tier_name, ctype, refused, refusal)
    tier = wait_condition(admin_api, ns, tier_name, "Ready", "False", refusal)
    conds = {c["type"]: c for c in tier["status"]["conditions"]}
    assert conds["Ready"]["message"] == conds[ctype]["message"]
    for step in ("Provisioned", "Applied", "Probed"):
        assert conds[step]["reason"] == "Blocked" and f"({refusal})" in conds[step]["message"]
    assert not any("waiting for" in c["message"] for c in conds.values()), conds
    assert tier["status"]["plan"]["summary"].endswith(f"({refusal})")
    operator.wait_resyncs(2)  # reconciles in flight, or a periodic pass, would write now
    core = client.CoreV1Api(admin_api)
    label = f"{TIER_ID}={tier_id(ns, tier_name)}"
    assert core.list_persistent_volume(label_selector=label).items == []
    assert core.list_namespaced_persistent_volume_claim(ns, label_selector=label).items == []
    writes = audit.writes(cluster.audit_log, since=start, namespace=ns)
    assert writes[("patch", "llminferenceservices")] == 0, writes
    assert writes[("create", "persistentvolumeclaims")] == 0, writes
