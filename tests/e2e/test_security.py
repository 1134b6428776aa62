"""Security: the operator identity holds only what it needs (never Secrets); a namespaced
tenant cannot, through any KVCacheTier field, make kvtier write outside its namespace, write
a cluster-scoped object, or place a PV outside a policy NVMe pool; every pod spec kvtier ships
or creates passes OpenShift's restricted-v2 rules."""

from __future__ import annotations

import posixpath
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.names.labels import MANAGED_BY, NVME_POOL, TIER_ID, TierRef
from kvtier.names.objects import nvme_volume_name, tier_id
from kvtier.render.probe_job import probe_job
from kvtier.tiers.base import PerPodClaim, ProbeVolume, SharedClaim
from localcluster import LocalCluster, build_binaries, write_kubeconfig
from tests.conftest import api_client
from tests.e2e import audit
from tests.e2e.conftest import create_target, llm_inference_service
from tests.e2e.kube_helpers import (
    GROUP,
    VERSION,
    apply_policy,
    condition,
    create_restricted_namespace,
    get_tier,
    tier_body,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kvtier-operator"
NEMOTRON = "hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
POOL, MOUNT = "local-nvme", "/var/mnt/nvme"
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": POOL,
            "mountPath": MOUNT,
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
            "volumeSource": "Local",
        }
    ],
    "cephfs": {"storageClassName": "ocs-storagecluster-cephfs"},
}
WORKLOAD = {"averageContextTokens": 50000, "concurrentSessions": 64}
CLUSTER_SCOPED_STORAGE = {
    "persistentvolumes",
    "storageclasses",
    "cephfilesystems",
}

# --- (a) the operator identity ---------------------------------------------------------------

# (verb, group, resource, subresource, namespace); namespace None means cluster-wide.
DENIED: list[tuple[str, str, str, str, str | None]] = [
    *[
        (verb, "", "secrets", "", ns)
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
        for ns in (None, "kvtier-system", "default", "kube-system")
    ],
    ("create", "", "pods", "", "default"),
    ("delete", "", "pods", "", "default"),
    ("create", "", "pods", "exec", "default"),
    ("create", "", "pods", "portforward", "default"),
    ("create", "", "pods", "eviction", "default"),
    ("create", "apps", "daemonsets", "", "default"),
    ("create", "apps", "statefulsets", "", "default"),
    ("create", "", "serviceaccounts", "", "kvtier-system"),
    ("create", "", "serviceaccounts", "token", "kvtier-system"),
    ("create", "", "services", "", "default"),
    ("patch", "", "configmaps", "", "default"),
    ("create", "", "configmaps", "", "default"),
    ("delete", "", "configmaps", "", "default"),
    ("create", "", "namespaces", "", None),
    # kvtier adds no pool to ODF's StorageCluster (an atomic list ocs-operator owns).
    ("get", "ocs.openshift.io", "storageclusters", "", "openshift-storage"),
    ("patch", "ocs.openshift.io", "storageclusters", "", "openshift-storage"),
    ("list", "", "namespaces", "", None),  # the watches are cluster-wide: no namespace scan
    ("delete", "", "namespaces", "", None),
    ("patch", "", "nodes", "", None),
    ("update", "", "nodes", "", None),
    ("delete", "", "nodes", "", None),
    ("patch", "", "nodes", "status", None),
    ("create", "rbac.authorization.k8s.io", "roles", "", "default"),
    ("create", "rbac.authorization.k8s.io", "rolebindings", "", "kvtier-system"),
    ("create", "rbac.authorization.k8s.io", "clusterroles", "", None),
    ("patch", "rbac.authorization.k8s.io", "clusterroles", "", None),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", "", None),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", "", None),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", None),
    ("impersonate", "", "users", "", None),
    ("impersonate", "", "groups", "", None),
    ("impersonate", "", "serviceaccounts", "", "kube-system"),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", "", None),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", "", None),
    ("patch", "apiextensions.k8s.io", "customresourcedefinitions", "", None),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", None),
    ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", None),
    ("create", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", None),
    ("create", "certificates.k8s.io", "certificatesigningrequests", "", None),
    ("update", "certificates.k8s.io", "certificatesigningrequests", "approval", None),
    ("create", "kvcache.io", "kvcachepolicies", "", None),
    ("patch", "kvcache.io", "kvcachepolicies", "", None),
    ("delete", "kvcache.io", "kvcachepolicies", "", None),
    ("create", "kvcache.io", "kvcachetiers", "", "default"),
    ("delete", "kvcache.io", "kvcachetiers", "", "default"),
    ("create", "serving.kserve.io", "inferenceservices", "", "default"),
    ("delete", "serving.kserve.io", "llminferenceservices", "", "default"),
    ("update", "coordination.k8s.io", "leases", "", "kube-system"),
    ("create", "coordination.k8s.io", "leases", "", "default"),
    ("create", "batch", "cronjobs", "", "default"),
    ("*", "*", "*", "", None),
]
# What the operator does need: the checks above are denials, not a broken identity.
ALLOWED: list[tuple[str, str, str, str, str | None]] = [
    ("list", "kvcache.io", "kvcachetiers", "", None),
    ("patch", "kvcache.io", "kvcachetiers", "status", "default"),
    ("patch", "serving.kserve.io", "llminferenceservices", "", "default"),
    ("create", "", "persistentvolumes", "", None),
    ("create", "", "persistentvolumeclaims", "", "default"),
    ("create", "batch", "jobs", "", "default"),
    # A CephFS tier's evictor; no more than the probe Job can already run.
    ("create", "apps", "deployments", "", "default"),
    ("patch", "apps", "deployments", "", "default"),
    ("list", "", "configmaps", "", None),
    ("update", "coordination.k8s.io", "leases", "", "kvtier-system"),
    # /metrics: the scraper's token and its right to get /metrics, asked of the API server.
    ("create", "authentication.k8s.io", "tokenreviews", "", None),
    ("create", "authorization.k8s.io", "subjectaccessreviews", "", None),
]


def _can(api: client.ApiClient, attrs: tuple[str, str, str, str, str | None]) -> bool:
    verb, group, resource, sub, ns = attrs
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=sub or None, namespace=ns
            )
        )
    )
    result = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status.allowed)


def test_operator_identity_is_denied_what_it_does_not_need(
    operator_api: client.ApiClient,
) -> None:
    allowed = [a for a in DENIED if _can(operator_api, a)]
    assert not allowed, f"the operator identity may {allowed}"
    missing = [a for a in ALLOWED if not _can(operator_api, a)]
    assert not missing, f"the operator identity lacks {missing}"


def test_operator_rules_never_mention_secrets_or_wildcards(cluster: LocalCluster) -> None:
    out = cluster.kubectl("auth", "can-i", "--list", kubeconfig=cluster.operator_kubeconfig)
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    resources = [row[0] for row in rows]
    assert not [r for r in resources if r.split(".")[0] in ("secrets", "*")], resources
    # Only the discovery/self-review defaults every authenticated user has may say `*`.
    wildcard = [row for row in rows if "[*]" in row and not row[0].startswith("[/")]
    assert not wildcard, wildcard


# --- (b) a namespaced tenant -----------------------------------------------------------------


def _audit_entries(audit_log: Path, since: float) -> list[dict[str, Any]]:
    """The operator's writes since `since`, Lease renewals left out (audit.entries, with its
    positive controls)."""
    return audit.entries(audit_log, since=since)


def _wait_quiet(cluster: LocalCluster, seconds: float = 5, timeout: float = 90) -> float:
    """Wait until the operator has written nothing but Events for `seconds`; returns that
    moment. Events left out: the periodic resync re-reports the refusals of other modules'
    tiers on the session cluster, and an Event reaches no tenant's or victim's object."""
    deadline = time.monotonic() + timeout
    writes: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        start = time.time()
        time.sleep(seconds)
        written = _audit_entries(cluster.audit_log, start)
        writes = [e for e in written if (e.get("objectRef") or {}).get("resource") != "events"]
        if not writes:
            return time.time()
    seen = sorted({audit.describe(e) for e in writes})
    raise AssertionError(f"the operator never went quiet; its last writes: {seen[:20]}")


class Tenant:
    def __init__(self, cluster: LocalCluster, admin: client.ApiClient, tmp: Path) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.ns, self.victim = f"tenant-{suffix}", f"victim-{suffix}"
        core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
        for ns in (self.ns, self.victim):
            create_restricted_namespace(admin, ns)
        core.create_namespaced_service_account(
            self.ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="tenant"))
        )
        rules = [
            client.V1PolicyRule(api_groups=["kvcache.io"], resources=["kvcachetiers"], verbs=["*"]),
            client.V1PolicyRule(
                api_groups=["serving.kserve.io"],
                resources=["llminferenceservices", "inferenceservices"],
                verbs=["*"],
            ),
            client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["*"]),
        ]
        rbac.create_namespaced_role(
            self.ns, client.V1Role(metadata=client.V1ObjectMeta(name="tenant"), rules=rules)
        )
        rbac.create_namespaced_role_binding(
            self.ns,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="tenant"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="tenant"
                ),
                subjects=[
                    client.RbacV1Subject(kind="ServiceAccount", name="tenant", namespace=self.ns)
                ],
            ),
        )
        token = cluster.kubectl("create", "token", "tenant", "-n", self.ns).strip()
        kubeconfig = write_kubeconfig(
            tmp / "tenant.kubeconfig",
            cluster.server,
            cluster.workdir / "pki" / "ca.crt",
            "tenant",
            token=token,
        )
        self.api = api_client(kubeconfig)

    def create_tier(self, name: str, spec: dict[str, Any], ns: str | None = None) -> None:
        body = tier_body(name, spec)
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            GROUP, VERSION, ns or self.ns, "kvcachetiers", body
        )


def _spec(target: str, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "Apply",
        "targetRef": {"kind": "LLMInferenceService", "name": target},
        "workload": WORKLOAD,
        "probe": {"enabled": False},  # kwok never finishes a probe pod
        **extra,
    }


def _nvme(pool: str) -> dict[str, Any]:
    return {"type": "NVMe", "nvme": {"pool": pool}}


# Spec fields a tenant controls, each aimed outside the tenant's reach: the API server must
# refuse them, naming the field.
ADMISSION_ATTACKS: list[tuple[str, dict[str, Any], str]] = [
    *[
        (f"pool-{i}", {"disk": _nvme(pool)}, "spec.disk.nvme.pool")
        for i, pool in enumerate(
            [
                "../x",
                "a/b",
                "..",
                ".",
                "/etc",
                "local-nvme/../../etc",
                "..%2Fetc",
                "local-nvme/",
                "LOCAL-NVME",
                "local-nvme\n",
                "",
                "~root",
                "p" * 64,
            ]
        )
    ],
    ("target-namespace", {"targetRef": None}, "spec.targetRef.namespace"),
    ("target-traversal", {"targetRef": "../VICTIM/victim-srv"}, "spec.targetRef.name"),
    ("target-core-kind", {"targetRef": "v1"}, "spec.targetRef.apiVersion"),
    (
        "configmap-name-traversal",
        {"model": {"configMapRef": {"name": "../VICTIM/victim-config", "key": "config.json"}}},
        "spec.model.configMapRef.name",
    ),
    (
        "configmap-key-traversal",
        {"model": {"configMapRef": {"name": "cfg", "key": "../../etc/passwd"}}},
        "spec.model.configMapRef.key",
    ),
    (
        "object-store-file-endpoint",
        {
            "disk": {
                "type": "ObjectStore",
                "objectStore": {"acknowledgeTailLatency": True, "endpoint": "file:///etc/shadow"},
            }
        },
        "spec.disk.objectStore.endpoint",
    ),
]


@pytest.fixture(scope="module")
def tenant(
    cluster: LocalCluster,
    admin_api: client.ApiClient,
    operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tenant]:
    apply_policy(admin_api, POLICY)
    yield Tenant(cluster, admin_api, tmp_path_factory.mktemp("tenant"))


def test_tenant_rbac_is_namespaced(tenant: Tenant) -> None:
    """The tenant itself is what the test assumes: its own namespace, nothing more."""
    with pytest.raises(ApiException) as denied:
        tenant.create_tier("x", _spec("srv"), ns=tenant.victim)
    assert denied.value.status == 403
    core = client.CoreV1Api(tenant.api)
    with pytest.raises(ApiException) as denied:
        core.list_namespaced_secret(tenant.ns)
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        core.list_persistent_volume()
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        client.CustomObjectsApi(tenant.api).list_cluster_custom_object(
            GROUP, VERSION, "kvcachepolicies"
        )
    assert denied.value.status == 403


def test_tenant_cannot_steer_kvtier_outside_its_reach(
    cluster: LocalCluster, admin_api: client.ApiClient, tenant: Tenant
) -> None:
    ns, victim = tenant.ns, tenant.victim
    core = client.CoreV1Api(admin_api)
    # The victim namespace holds a target and a model config a tenant might aim at.
    create_target(admin_api, victim, llm_inference_service("victim-srv", tp=8, model_uri=NEMOTRON))
    core.create_namespaced_config_map(
        victim,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="victim-config"), data={"config.json": "{}"}
        ),
    )
    victim_before = client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        "serving.kserve.io", "v1alpha2", victim, "llminferenceservices", "victim-srv"
    )["metadata"]["resourceVersion"]
    create_target(tenant.api, ns, llm_inference_service("srv", tp=8, model_uri=NEMOTRON))
    create_target(tenant.api, ns, llm_inference_service("legit-srv", tp=8, model_uri=NEMOTRON))
    since = _wait_quiet(cluster)

    # 1. Refused at admission, naming the field.
    for name, extra, field_name in ADMISSION_ATTACKS:
        spec = _spec("srv", **{k: v for k, v in extra.items() if k != "targetRef"})
        ref = extra.get("targetRef", "srv")
        if ref is None:
            spec["targetRef"] = {"kind": "LLMInferenceService", "name": "srv", "namespace": victim}
        elif ref == "v1":
            spec["targetRef"] = {"apiVersion": "v1", "kind": "LLMInferenceService", "name": "srv"}
        else:
            spec["targetRef"] = {
                "kind": "LLMInferenceService",
                "name": ref.replace("VICTIM", victim),
            }
        if "model" in extra:
            ref_cm = dict(extra["model"]["configMapRef"])
            ref_cm["name"] = ref_cm["name"].replace("VICTIM", victim)
            spec["model"] = {"configMapRef": ref_cm}
        with pytest.raises(ApiException) as refused:
            tenant.create_tier(f"attack-{name}", spec)
        assert refused.value.status == 422, (name, refused.value.body)
        assert field_name in str(refused.value.body), (name, refused.value.body)

    # 2. Admitted, but kvtier refuses to act: a condition, and nothing written.
    hostile = {
        "unknown-pool": (
            _spec("srv", disk=_nvme("not-a-pool")),
            "PolicyCompliant",
            "UnknownNVMePool",
        ),
        "class-name-as-pool": (
            _spec("srv", disk=_nvme(f"kvtier-nvme-{POOL}")),
            "PolicyCompliant",
            "UnknownNVMePool",
        ),
        "victim-target": (_spec("victim-srv"), "TargetFound", "TargetNotFound"),
        "victim-config": (
            _spec(
                "srv",
                model={"configMapRef": {"name": "victim-config", "key": "config.json"}},
            ),
            "Sized",
            "ConfigMapNotFound",
        ),
        "kube-system-config": (
            _spec(
                "srv",
                model={
                    "configMapRef": {
                        "name": "extension-apiserver-authentication",
                        "key": "client-ca-file",
                    }
                },
            ),
            "Sized",
            "ConfigMapNotFound",
        ),
        "object-store-with-secret": (
            _spec(
                "srv",
                disk={
                    "type": "ObjectStore",
                    "objectStore": {
                        "acknowledgeTailLatency": True,
                        "bucket": "kv-cache",
                        "endpoint": "https://s3.example.com",
                        "credentialsSecretRef": {"name": "victim-secret"},
                    },
                },
            ),
            "PolicyCompliant",
            "ObjectStoreNotAllowed",
        ),
    }
    srv_before = client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", "srv"
    )["metadata"]["resourceVersion"]
    for name, (spec, _, _) in hostile.items():
        tenant.create_tier(name, spec)
    # 3. A legitimate tier on the policy's pool, its name full of dots: PVs inside the pool.
    legit = "legit.tier.etc"
    tenant.create_tier(legit, _spec("legit-srv", disk={**_nvme(POOL)}))
    for name, (_, ctype, reason) in hostile.items():
        wait_condition(admin_api, ns, name, ctype, "False", reason, timeout=90)
    wait_condition(admin_api, ns, legit, "Ready", "True", "Applied", timeout=120)
    time.sleep(3)
    for name in hostile:
        ready = condition(get_tier(admin_api, ns, name), "Ready")
        assert ready and ready["status"] == "False"

    entries = _audit_entries(cluster.audit_log, since)
    pool_nodes = [
        str(n.metadata.name)
        for n in core.list_node(label_selector="kvcache.io/local-nvme=true").items
    ]
    legit_pvs = {nvme_volume_name(ns, legit, node) for node in pool_nodes}
    elsewhere = [e for e in entries if e.get("objectRef", {}).get("namespace") not in (None, ns)]
    assert not elsewhere, [(e["verb"], e["objectRef"]) for e in elsewhere]
    cluster_writes = [e for e in entries if e.get("objectRef", {}).get("namespace") is None]
    unexpected = [
        (e["verb"], e["objectRef"])
        for e in cluster_writes
        if e["objectRef"].get("resource") != "persistentvolumes"
        or e["objectRef"].get("name") not in legit_pvs
    ]
    assert not unexpected, f"cluster-scoped writes not for the legit tier's PVs: {unexpected}"
    assert {e["objectRef"]["resource"] for e in cluster_writes} <= CLUSTER_SCOPED_STORAGE
    # Nothing was written for a hostile tier, and the targets they named are untouched.
    hostile_ids = {tier_id(ns, name) for name in hostile}
    labels = [
        (pv.metadata.name, pv.metadata.labels or {}) for pv in core.list_persistent_volume().items
    ] + [
        (c.metadata.name, c.metadata.labels or {})
        for c in core.list_namespaced_persistent_volume_claim(ns).items
    ]
    assert not [n for n, lab in labels if str(lab.get(TIER_ID)) in hostile_ids]
    custom = client.CustomObjectsApi(admin_api)
    assert (
        custom.get_namespaced_custom_object(
            "serving.kserve.io", "v1alpha2", victim, "llminferenceservices", "victim-srv"
        )["metadata"]["resourceVersion"]
        == victim_before
    )
    assert (
        custom.get_namespaced_custom_object(
            "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", "srv"
        )["metadata"]["resourceVersion"]
        == srv_before
    )
    # The legit tier's PVs sit under the pool's mount point; its pods see only claims.
    pvs = core.list_persistent_volume(label_selector=f"{TIER_ID}={tier_id(ns, legit)}").items
    assert {pv.metadata.name for pv in pvs} == legit_pvs
    patched = custom.get_namespaced_custom_object(
        "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", "legit-srv"
    )
    assert_no_host_paths(patched["spec"])
    print(
        f"tenant: {len(ADMISSION_ATTACKS)} attacks refused at admission, {len(hostile)} shown "
        f"as conditions with no write; operator writes in the window: "
        f"{sorted({(e['verb'], e['objectRef'].get('resource')) for e in entries})}"
    )


def assert_no_host_paths(value: Any) -> None:
    """Nothing in a pod-facing spec mounts a host path."""
    if isinstance(value, Mapping):
        assert "hostPath" not in value, value
        for v in value.values():
            assert_no_host_paths(v)
    elif isinstance(value, list):
        for v in value:
            assert_no_host_paths(v)


def test_every_kvtier_pv_lies_inside_a_policy_pool(admin_api: client.ApiClient) -> None:
    pools = {p["name"]: p["mountPath"] for p in POLICY["nvmePools"]}
    pvs = (
        client.CoreV1Api(admin_api)
        .list_persistent_volume(label_selector=f"{MANAGED_BY}=kvtier")
        .items
    )
    for pv in pvs:
        pool = (pv.metadata.labels or {}).get(NVME_POOL)
        assert pool in pools, f"PV {pv.metadata.name} in no policy pool ({pool})"
        source = pv.spec.local
        assert pv.spec.host_path is None, f"PV {pv.metadata.name} is a hostPath PV"
        assert source is not None, f"PV {pv.metadata.name} is not a local PV"
        path = source.path
        mount = pools[pool]
        assert posixpath.normpath(path) == path, path
        assert path == mount or path.startswith(mount + "/"), (pv.metadata.name, path)


# --- (c) restricted-v2 ----------------------------------------------------------------------

RESTRICTED_VOLUMES = {
    "configMap",
    "downwardAPI",
    "emptyDir",
    "persistentVolumeClaim",
    "projected",
    "secret",
    "ephemeral",
    "csi",
}


def restricted_v2_violations(pod: Mapping[str, Any]) -> list[str]:
    """What OpenShift's restricted-v2 SCC (and the Pod Security `restricted` level) refuse,
    plus a read-only root filesystem, which kvtier's pods promise too."""
    bad = []
    psc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        if pod.get(key) and key != "hostUsers":
            bad.append(f"{key} is set")
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        if key in psc:
            bad.append(f"pod securityContext.{key} fixes an id (restricted-v2 assigns it)")
    if (psc.get("seLinuxOptions") or {}).get("type"):
        bad.append("pod seLinuxOptions.type set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"volume {volume['name']} uses {sorted(kinds - RESTRICTED_VOLUMES)}")
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    assert containers, "no containers"
    for c in containers:
        sc = c.get("securityContext") or {}
        where = f"container {c['name']}"
        if sc.get("privileged"):
            bad.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{where}: allowPrivilegeEscalation not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{where}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{where}: adds capabilities {caps['add']}")
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            bad.append(f"{where}: runAsNonRoot not true")
        if "runAsUser" in sc or "runAsGroup" in sc:
            bad.append(f"{where}: fixes a user or group id")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{where}: seccompProfile {seccomp}")
        if sc.get("readOnlyRootFilesystem") is not True:
            bad.append(f"{where}: root filesystem not read-only")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            bad.append(f"{where}: hostPort")
    return bad


def pod_specs(docs: list[Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name")
        spec = doc.get("spec") or {}
        if kind == "Pod":
            yield f"Pod {name}", spec
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            yield f"{kind} {name}", spec["template"]["spec"]
        elif kind == "CronJob":
            yield f"CronJob {name}", spec["jobTemplate"]["spec"]["template"]["spec"]
        elif kind == "ClusterServiceVersion":
            for d in spec["install"]["spec"]["deployments"]:
                yield f"CSV deployment {d['name']}", d["spec"]["template"]["spec"]


def helm_template(*args: str) -> list[Any]:
    helm = build_binaries(helm=True) / "helm"
    out = subprocess.run(
        [str(helm), "template", "kvtier-operator", str(CHART), "-n", "kvtier-system", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return list(yaml.safe_load_all(out))


@pytest.mark.parametrize(
    "source", ["helm default values", "helm ci/full-values.yaml", "deploy/manifests", "bundle"]
)
def test_shipped_pod_specs_pass_restricted_v2(source: str) -> None:
    if source == "helm default values":
        docs = helm_template()
    elif source == "helm ci/full-values.yaml":
        docs = helm_template("-f", str(CHART / "ci" / "full-values.yaml"))
    elif source == "deploy/manifests":
        docs = list(
            yaml.safe_load_all((REPO / "deploy" / "manifests" / "operator.yaml").read_text())
        )
    else:
        docs = [
            yaml.safe_load(p.read_text())
            for p in sorted((REPO / "bundle" / "manifests").glob("*.yaml"))
        ]
    specs = list(pod_specs(docs))
    assert specs, f"no pod spec in {source}"
    for what, pod in specs:
        assert not restricted_v2_violations(pod), (what, restricted_v2_violations(pod))
        assert pod.get("serviceAccountName") == "kvtier-operator" or "Job" in what


@pytest.mark.parametrize("disk", ["NVMe", "CephFS"])
def test_probe_job_passes_restricted_v2(disk: str) -> None:
    tier = TierRef("team-a", "nemotron", uid="0d3f0c5e-1111-2222-3333-444455556666")
    volume: ProbeVolume = (
        ProbeVolume(
            "NVMe",
            PerPodClaim(
                {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": f"kvtier-nvme-{POOL}",
                    "resources": {"requests": {"storage": "1Ti"}},
                }
            ),
            {"kubernetes.io/hostname": "gpu-node-0"},
        )
        if disk == "NVMe"
        else ProbeVolume("CephFS", SharedClaim("kvtier-nemotron-cephfs"))
    )
    job = probe_job(
        tier,
        volume,
        image="quay.io/kvtier/kvtier-operator:0.1.0",
        block_bytes=4194304,
        runtime_seconds=60,
        generation=3,
    )
    pod = job["spec"]["template"]["spec"]
    assert not restricted_v2_violations(pod)
    assert pod.get("automountServiceAccountToken") is False
    assert_no_host_paths(pod)
    assert job["metadata"]["namespace"] == tier.namespace
