"""Pod Security Admission on the real kube-apiserver: the e2e namespaces enforce the
restricted standard, the PodSecurity plugin is active and refuses what the standard forbids,
and a model server's pod with everything kvtier added (memory, the /dev/shm memory emptyDir,
the disk tier's claim or claim template, mounts, env) is admitted there, for every target
kind and disk.

An InferenceService's pod is the one KServe's own controller builds (tests/e2e/kserve_isvc.py):
the ReplicaSet's pod of the Deployment KServe writes, through KServe's pod webhook, is created
in a restricted namespace, so the real PodSecurity admission admitted it. An LLMInferenceService's
pod (no controller for it on the session cluster) is the target's template, created with
server-side dry run (`dryRun=All`): admission runs in full, nothing is stored."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.api.common import quantity_bytes
from kvtier.names import FIELD_MANAGER
from kvtier.names.objects import DSHM_VOLUME, EVICTOR_CONTAINER, KV_CACHE_VOLUME
from tests.e2e.conftest import create_target, inference_service, llm_inference_service
from tests.e2e.kserve_isvc import (
    CONTAINER,
    KServeISVCStack,
    container,
    get_isvc,
    pod_of_template,
)
from tests.e2e.kube_helpers import (
    GROUP,
    POD_SECURITY_LABELS,
    VERSION,
    apply_policy,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_isvc_runtime_offload import settled_template, template, waited
from tests.e2e.test_operator_apply import POLICY, POOL
from tests.pod_security import (
    USER_CONTAINER_SECURITY,
    USER_POD_SECURITY,
    pod_from_target,
    restricted_target,
    restricted_violations,
)

CEPHFS_CLASS = POLICY["cephfs"]["storageClassName"]
NEMOTRON = "hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
# The model from a PVC: for an hf:// storageUri KServe v0.20.0's pod webhook adds its
# storage-initializer init container, which sets no securityContext, so the pod is refused
# under restricted whatever kvtier does.
LLAMA_PVC = "pvc://models/llama-3-1-70b"
REFUSED = 'violates PodSecurity "restricted:latest"'
VERSIONS = {
    "llmisvc-v1alpha1": ("serving.kserve.io", "v1alpha1", "llminferenceservices"),
    "llmisvc-v1alpha2": ("serving.kserve.io", "v1alpha2", "llminferenceservices"),
}
DISKS = ["None", "NVMe", "CephFS"]


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "psa")


@pytest.fixture(scope="module")
def isvc_ns(kserve_isvc_stack: KServeISVCStack) -> Iterator[str]:
    """A restricted namespace on KServe's cluster (the stack applied POLICY); deleted after
    the module with the services, so their pods hold no node for the modules after it."""
    api = kserve_isvc_stack.api
    name = new_namespace(api, "psa-isvc")
    yield name
    client.CoreV1Api(api).delete_namespace(name)


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    """A pod as a restricted user writes it; `spec` overrides."""
    body: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "main",
                "image": "registry.example/app:1",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def dry_run_pod(api: client.ApiClient, ns: str, pod: dict[str, Any]) -> str | None:
    """None when kube-apiserver admits the pod (server-side dry run), else its refusal:
    403 from an admission plugin (PodSecurity), 422 from validation."""
    try:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod, dry_run="All")  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status in (403, 422):
            return str(json.loads(exc.body or "{}").get("message", exc.body))
        raise
    return None


def test_e2e_namespaces_enforce_restricted(admin_api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(admin_api)
    for name in (ns, "kvtier-system"):  # a test's own, and the operator's (deploy/manifests)
        labels = core.read_namespace(name).metadata.labels or {}
        assert {k: labels.get(k) for k in POD_SECURITY_LABELS} == POD_SECURITY_LABELS, name


def _host_path(pod: dict[str, Any]) -> None:
    pod["spec"].setdefault("volumes", []).append(
        {"name": "host", "hostPath": {"path": "/var/mnt/nvme"}}
    )
    pod["spec"]["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "host", "mountPath": "/mnt/host"}
    )


def _privileged(pod: dict[str, Any]) -> None:
    sc = pod["spec"]["containers"][0]["securityContext"]
    sc.pop("allowPrivilegeEscalation", None)  # privileged implies it; false is invalid
    sc["privileged"] = True


def _cap_sys_admin(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]


def _root(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0


def _escalating(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True


def _bare(pod: dict[str, Any]) -> None:
    pod["spec"].pop("securityContext")
    pod["spec"]["containers"][0].pop("securityContext")


# name: (change, words of the refusal, refused by PodSecurity). A privileged container is
# refused even earlier, by validation: the local kube-apiserver runs with the default
# --allow-privileged=false ("disallowed by cluster policy").
BREACHES: dict[str, tuple[Callable[[dict[str, Any]], None], str, bool]] = {
    "hostPath": (_host_path, "hostPath", True),
    "escalation": (_escalating, "allowPrivilegeEscalation", True),
    "capability": (_cap_sys_admin, "SYS_ADMIN", True),
    "root": (_root, "runAsUser=0", True),
    "no-securityContext": (_bare, "runAsNonRoot", True),
    "privileged": (_privileged, "privileged", False),
}


def _refused(refusal: str | None, words: str, by_psa: bool) -> bool:
    return refusal is not None and words in refusal and (REFUSED in refusal or not by_psa)


def test_podsecurity_admission_is_active(admin_api: client.ApiClient, ns: str) -> None:
    """The plugin is on (the v1.36 default) and judges by the namespace's label."""
    assert dry_run_pod(admin_api, ns, _pod("ok")) is None
    for breach, (change, words, by_psa) in BREACHES.items():
        pod = _pod(f"bad-{breach.lower()}")
        change(pod)
        refusal = dry_run_pod(admin_api, ns, pod)
        assert refusal is not None, f"a {breach} pod was admitted under restricted"
        assert _refused(refusal, words, by_psa), (breach, refusal)
    # The same pod in a namespace without the label (the cluster's default level,
    # privileged): admitted, so the refusals above are the label's doing.
    pod = _pod("bare")
    _bare(pod)
    assert dry_run_pod(admin_api, "default", pod) is None


def _user_target(kind: str, name: str) -> dict[str, Any]:
    version = VERSIONS[kind][1]
    user = llm_inference_service(
        name,
        tp=8,
        replicas=2,
        model_uri=NEMOTRON,
        api_version=f"serving.kserve.io/{version}",
    )
    return restricted_target(user)


def _read_target(api: client.ApiClient, kind: str, ns: str, name: str) -> dict[str, Any]:
    group, version, plural = VERSIONS[kind]
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, ns, plural, name
    )
    return cast(dict[str, Any], obj)


def _play_cephfs_provisioner(api: client.ApiClient, ns: str, tier: str) -> None:
    claim = eventually(
        lambda: next(
            (
                t.get("claimName")
                for t in (get_tier(api, ns, tier).get("status") or {}).get("tiers") or []
                if t["name"] == "cephfs"
            ),
            None,
        ),
        what="the CephFS claim",
    )
    client.CoreV1Api(api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"{ns}-{tier}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Ti"},
                access_modes=["ReadWriteMany"],
                storage_class_name=CEPHFS_CLASS,
                persistent_volume_reclaim_policy="Delete",
                claim_ref=client.V1ObjectReference(namespace=ns, name=claim),
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"{ns}-{tier}"
                ),
            ),
        )
    )


def _without_own_containers(fields: Any) -> Any:
    """managedFields without kvtier's own evictor container: its restricted securityContext
    is kvtier's to set (the user's containers are what must stay untouched)."""
    if isinstance(fields, dict):
        own = f'k:{{"name":"{EVICTOR_CONTAINER}"}}'
        return {k: _without_own_containers(v) for k, v in fields.items() if k != own}
    return fields


def _kvtier_fields(target: dict[str, Any]) -> str:
    """What kvtier's field manager owns on the target, as managedFields text, outside the
    containers that are kvtier's own."""
    entries = [
        e for e in target["metadata"].get("managedFields") or [] if e["manager"] == FIELD_MANAGER
    ]
    assert entries, f"{FIELD_MANAGER} owns nothing on the target"
    return json.dumps([_without_own_containers(e.get("fieldsV1")) for e in entries])


Tier = tuple[client.ApiClient, str, str]  # (the cluster's client, namespace, name)


@pytest.fixture
def tiers() -> Iterator[list[Tier]]:
    """The tiers a test creates; deleted after it (kvtier takes its fields back), so none
    keeps an operator busy in later modules."""
    made: list[Tier] = []
    yield made
    for api, ns, name in made:
        try:
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, ns, "kvcachetiers", name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def _tier_spec(target_ref: dict[str, Any], disk: str, **extra: Any) -> dict[str, Any]:
    disk_spec: dict[str, Any] = {"type": disk}
    if disk == "NVMe":
        disk_spec["nvme"] = {"pool": POOL, "size": "1Ti"}
    elif disk == "CephFS":
        disk_spec["cephfs"] = {"size": "1Ti"}
    return {
        "mode": "Apply",
        "targetRef": target_ref,
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
        "cpu": {"size": "200Gi"},
        "disk": disk_spec,
        "probe": {"enabled": False},  # the probe Job has tests of its own
        **extra,
    }


def _assert_owns_no_loosening(target: dict[str, Any]) -> None:
    """What kvtier owns on the target: no security setting, no host path."""
    owned = _kvtier_fields(target)
    for key in ("f:securityContext", "f:hostPath", "f:privileged", "f:hostNetwork"):
        assert key not in owned, (key, owned)


def _assert_breaches_refused(api: client.ApiClient, ns: str, pod: dict[str, Any]) -> None:
    """Control: the same pod, had kvtier added a host path or a privileged setting to its
    first container, is refused."""
    for breach, (change, words, by_psa) in BREACHES.items():
        if breach == "no-securityContext":
            continue
        loosened = copy.deepcopy(pod)
        change(loosened)
        refusal = dry_run_pod(api, ns, loosened)
        assert _refused(refusal, words, by_psa), (breach, refusal)


@pytest.mark.parametrize("disk", DISKS)
@pytest.mark.parametrize("kind", sorted(VERSIONS))
def test_model_server_pod_with_kvtiers_additions_is_admitted(
    admin_api: client.ApiClient, ns: str, tiers: list[Tier], kind: str, disk: str
) -> None:
    name = f"{kind}-{disk.lower()}"
    tiers.append((admin_api, ns, name))
    user = _user_target(kind, name)
    create_target(admin_api, ns, user)
    target_ref: dict[str, Any] = {"kind": user["kind"], "name": name}
    if kind == "llmisvc-v1alpha1":
        target_ref["apiVersion"] = user["apiVersion"]
    create_tier(admin_api, ns, name, _tier_spec(target_ref, disk))
    if disk == "CephFS":
        _play_cephfs_provisioner(admin_api, ns, name)
    wait_condition(admin_api, ns, name, "Ready", "True", "Applied", timeout=120)
    patched = _read_target(admin_api, kind, ns, name)
    _assert_owns_no_loosening(patched)

    # The pod KServe would run, securityContext exactly as the target now carries it (the
    # user's, which kvtier's writes left alone); kvtier's additions are in it.
    pod = pod_from_target(patched, name)
    spec = pod["spec"]
    user_pod = pod_from_target(user, name)["spec"]
    assert spec["securityContext"] == user_pod["securityContext"]
    assert spec["containers"][0]["securityContext"] == user_pod["containers"][0]["securityContext"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    main = spec["containers"][0]
    mounts = {m["mountPath"] for m in main.get("volumeMounts", [])}
    if disk == "None":
        # vLLM 0.24 (the default) keeps a CPU-only tier in private pinned memory: no /dev/shm.
        assert DSHM_VOLUME not in volumes and "/dev/shm" not in mounts
    else:
        assert volumes[DSHM_VOLUME]["emptyDir"]["medium"] == "Memory"
        assert "/dev/shm" in mounts
    sources = {k for v in spec.get("volumes", []) for k in v if k != "name"}
    if disk == "NVMe":
        assert "ephemeral" in sources, spec["volumes"]
    elif disk == "CephFS":
        assert "persistentVolumeClaim" in sources, spec["volumes"]
    assert main["resources"] != user_pod["containers"][0]["resources"]  # memory raised
    assert restricted_violations(spec) == []

    assert dry_run_pod(admin_api, ns, pod) is None, dry_run_pod(admin_api, ns, pod)
    _assert_breaches_refused(admin_api, ns, pod)


def _template_pod(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    """A pod as the ReplicaSet makes one of `tpl`: its labels bring KServe's pod webhook in."""
    meta = {k: v for k, v in tpl["metadata"].items() if k in ("labels", "annotations")}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**copy.deepcopy(meta), "name": name},
        "spec": copy.deepcopy(tpl["spec"]),
    }


def _shm_mount(ctr: dict[str, Any]) -> dict[str, Any]:
    """The container's one /dev/shm mount (two would make the pod invalid)."""
    mounts: list[dict[str, Any]] = ctr.get("volumeMounts") or []
    [mount] = [m for m in mounts if m["mountPath"] == "/dev/shm"]
    return mount


@pytest.mark.parametrize("disk", DISKS)
def test_kserves_pod_with_kvtiers_additions_is_admitted(
    kserve_isvc_stack: KServeISVCStack, isvc_ns: str, tiers: list[Tier], disk: str
) -> None:
    """The user's restricted InferenceService on KServe's kserve-vllmserver runtime (its model
    on a PVC, see LLAMA_PVC): the ReplicaSet's pod of the Deployment KServe writes exists in
    the restricted namespace, so PodSecurity admitted it, before the tier and with it. The
    tiered pod carries kvtier's memory above the user's pod's, the disk claim or claim template
    (NVMe: and the evictor sidecar), one /dev/shm mount (kvtier's memory emptyDir, except a
    CPU-only tier of the default vLLM, which keeps the runtime's), and the securityContexts
    KServe gave the user's pod; its template with a host path or a privileged setting added
    is refused."""
    stack, ns = kserve_isvc_stack, isvc_ns
    api = stack.api
    name = f"isvc-{disk.lower()}"
    tiers.append((api, ns, name))
    user = inference_service(name, tp=4, model_uri=LLAMA_PVC, min_replicas=2, max_replicas=2)
    create_target(api, ns, restricted_target(user))
    user_spec = pod_of_template(api, ns, name, template(stack, ns, name))["spec"]
    user_main = container(user_spec, CONTAINER)
    # KServe's pod of the user's service: the user's securityContexts (the container's merged
    # with the runtime's), which kvtier must leave as they are.
    assert user_spec["securityContext"] == USER_POD_SECURITY
    assert USER_CONTAINER_SECURITY.items() <= user_main["securityContext"].items()

    target_ref = {"kind": "InferenceService", "name": name}
    # A model on a PVC has no name kvtier can read: the tier gives it.
    create_tier(api, ns, name, _tier_spec(target_ref, disk, model={"name": "llama-3.1-70b"}))
    if disk == "CephFS":
        _play_cephfs_provisioner(api, ns, name)
    tier = waited(stack, ns, name, "Ready", "True", "Applied", timeout=120)
    service = get_isvc(api, ns, name)
    _assert_owns_no_loosening(service)
    applied = json.loads(service["metadata"]["annotations"]["kvcache.io/applied"])
    tpl = settled_template(stack, ns, name, applied["kvTransferConfig"])
    spec = pod_of_template(api, ns, name, tpl)["spec"]
    main = container(spec, CONTAINER)
    assert spec["securityContext"] == user_spec["securityContext"]
    assert main["securityContext"] == user_main["securityContext"]
    request = main["resources"]["requests"]["memory"]
    assert quantity_bytes(request) > quantity_bytes(user_main["resources"]["requests"]["memory"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    if disk == "None":
        # vLLM 0.24 (the default) keeps a CPU-only tier in private pinned memory.
        assert DSHM_VOLUME not in volumes and _shm_mount(main) == _shm_mount(user_main)
        assert KV_CACHE_VOLUME not in volumes
    else:
        assert _shm_mount(main)["name"] == DSHM_VOLUME
        shm = volumes[DSHM_VOLUME]["emptyDir"]
        assert shm["medium"] == "Memory" and quantity_bytes(shm["sizeLimit"]) > 0
    if disk == "NVMe":
        assert "ephemeral" in volumes[KV_CACHE_VOLUME], volumes
        init = {c["name"]: c for c in spec.get("initContainers") or []}
        assert init[EVICTOR_CONTAINER]["restartPolicy"] == "Always"
    elif disk == "CephFS":
        claim = next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
        assert volumes[KV_CACHE_VOLUME]["persistentVolumeClaim"]["claimName"] == claim
    assert restricted_violations(spec) == []

    pod = _template_pod(tpl, f"{name}-dry")
    assert dry_run_pod(api, ns, pod) is None, dry_run_pod(api, ns, pod)
    _assert_breaches_refused(api, ns, pod)


@pytest.mark.parametrize("disk", ["NVMe", "CephFS"])
def test_probe_job_pod_is_admitted(
    admin_api: client.ApiClient, ns: str, tiers: list[Tier], disk: str
) -> None:
    """The fio Job kvtier starts: the Job controller's pod exists in the restricted
    namespace (a refused pod leaves only a FailedCreate event), and a pod of the same
    template passes a dry run."""
    name = f"probe-{disk.lower()}"
    tiers.append((admin_api, ns, name))
    create_target(
        admin_api, ns, restricted_target(llm_inference_service(name, tp=8, model_uri=NEMOTRON))
    )
    disk_spec: dict[str, Any] = (
        {"type": "NVMe", "nvme": {"pool": POOL, "size": "1Ti"}}
        if disk == "NVMe"
        else {"type": "CephFS", "cephfs": {"size": "1Ti"}}
    )
    create_tier(
        admin_api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": name},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 96},
            "cpu": {"size": "200Gi"},
            "disk": disk_spec,
            "probe": {"enabled": True, "baselineTTFTSeconds": 60, "runtimeSeconds": 5},
        },
    )
    if disk == "CephFS":
        _play_cephfs_provisioner(admin_api, ns, name)
    batch, core = client.BatchV1Api(admin_api), client.CoreV1Api(admin_api)
    job = eventually(
        lambda: next(
            (
                j
                for j in batch.list_namespaced_job(ns).items
                if j.metadata.owner_references and j.metadata.owner_references[0].name == name
            ),
            None,
        ),
        what=f"the probe Job of {name}",
    )
    pods = eventually(
        lambda: core.list_namespaced_pod(ns, label_selector=f"job-name={job.metadata.name}").items,
        what="the probe pod, admitted under restricted",
    )
    assert pods[0].spec.containers[0].command[:2] == ["kvtier", "probe"]
    template = admin_api.sanitize_for_serialization(job.spec.template)  # type: ignore[no-untyped-call]
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-dry"}}
    pod["spec"] = template["spec"]
    assert restricted_violations(pod["spec"]) == []
    assert dry_run_pod(admin_api, ns, pod) is None
