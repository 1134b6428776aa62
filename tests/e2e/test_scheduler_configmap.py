"""The router's CPU-tier scorer in a ConfigMap (LLMInferenceService spec.router.scheduler.config
.ref, KServe v0.20.0's CRDs) on the local control plane, with the operator under its own
identity: in a namespace the platform team opted in (deploy/manifests/opt-in, the chart's
Role) kvtier writes its block count into the key's text and nothing else; elsewhere the API
server answers 403 and the condition gives the value and the grant, nothing written; Argo CD
re-applies cause no write war; a concurrent edit is not clobbered; a ConfigMap the server no
longer names gets its text back; deleting the tier gives the user's text back byte for byte.

Argo CD is played as in test_real_contracts.py: a forced apply by its manager, the live values
of the fields deploy/argocd/application.yaml ignores carried into the manifest.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kvtier.kube.rest import Kube
from kvtier.names.objects import tier_id
from kvtier.names.records import SCHEDULER_RECORD as RECORD_ANNOTATION
from kvtier.render.picker_version import picker_layout
from kvtier.render.scheduler import SchedulerSync
from kvtier.render.scheduler_configmap import (
    GRANT_VALUE,
    configmap_sync,
    configmap_writes,
)
from kvtier.sizing import ConnectorSettings
from kvtier.targets.offload import RoleOffload
from localcluster import LocalCluster
from tests.e2e import audit
from tests.e2e.conftest import llm_inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_chart import CHART, helm
from tests.e2e.test_llmd_roles import _tier
from tests.e2e.test_operator_apply import POLICY
from tests.e2e.test_real_contracts import APPLIED, ARGO, argo_sync, live, respecting_ignored
from tests.scheduler_fixtures import EPP, plugin_parameters

REPO = Path(__file__).resolve().parents[2]
OPT_IN = REPO / "deploy" / "manifests" / "opt-in" / "scheduler-configmaps.yaml"
ROUNDS = 10
CONFIGMAP = "qwen-epp"


def _configmap(text: str = EPP) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP},
        "data": {"epp": text, "README": "the router's config"},
    }


def _server() -> dict[str, Any]:
    server = llm_inference_service("qwen", tp=4, replicas=2, model_uri="hf://Qwen/Qwen3-32B")
    server["spec"]["model"]["name"] = "Qwen/Qwen3-32B"
    (main,) = server["spec"]["template"]["containers"]
    main["image"] = "ghcr.io/llm-d/llm-d-cuda:v0.8.0"
    server["spec"]["router"] = {
        "route": {},
        "gateway": {},
        "scheduler": {
            # A 0.8 picker, whose scorer takes the capacity (KServe drops it from 0.9.0).
            "annotations": {"app.kubernetes.io/version": "0.8.0"},
            "config": {"ref": {"name": CONFIGMAP, "key": "epp"}},
        },
    }
    return server


TIER = _tier("qwen")


def _read(api: client.ApiClient, ns: str, name: str = CONFIGMAP) -> dict[str, Any]:
    found: dict[str, Any] = Kube(api).request("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
    return found


def _argo_configmap(api: client.ApiClient, ns: str, manifest: dict[str, Any]) -> None:
    """One Argo CD self-heal sync of the ConfigMap (RespectIgnoreDifferences)."""
    try:
        current = _read(api, ns)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        current = {}
    _apply_as_argo(api, ns, respecting_ignored(manifest, current) if current else manifest)


def _apply_as_argo(api: client.ApiClient, ns: str, configmap: dict[str, Any]) -> None:
    """A forced apply of the ConfigMap by Argo CD's manager."""
    name = configmap["metadata"]["name"]
    Kube(api).request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/{name}",
        json.dumps({**configmap, "metadata": {**configmap["metadata"], "namespace": ns}}),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": ARGO, "force": "true"},
    )


def _opt_in(api: client.ApiClient, ns: str) -> None:
    """The platform team's grant: the rendered opt-in Role and RoleBinding, for `ns`."""
    for doc in yaml.safe_load_all(OPT_IN.read_text()):
        doc["metadata"]["namespace"] = ns
        rbac = client.RbacAuthorizationV1Api(api)
        if doc["kind"] == "Role":
            rbac.create_namespaced_role(ns, doc)
        else:
            rbac.create_namespaced_role_binding(ns, doc)


@pytest.fixture(scope="module")
def namespaces(admin_api: client.ApiClient, operator: OperatorProcess) -> dict[str, str]:
    """An opted-in and a closed namespace, each with the user's ConfigMap and model server
    (synced by Argo CD) and one tier."""
    apply_policy(admin_api, POLICY)
    out = {
        "opted": new_namespace(admin_api, "epp-opted"),
        "closed": new_namespace(admin_api, "epp-closed"),
    }
    _opt_in(admin_api, out["opted"])
    for ns in out.values():
        _argo_configmap(admin_api, ns, _configmap())
        argo_sync(admin_api, ns, _server())
        create_tier(admin_api, ns, "qwen", TIER)
    for ns in out.values():
        wait_condition(admin_api, ns, "qwen", "Applied", "True", timeout=120)
    return out


def _blocks(api: client.ApiClient, ns: str) -> int:
    (decode,) = get_tier(api, ns, "qwen")["status"]["plan"]["roles"]
    blocks: int = decode["cpuTierBlocks"]
    return blocks


def test_an_opted_in_namespace_gets_kvtiers_block_count_in_the_users_text(
    admin_api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    ns = namespaces["opted"]
    tier = wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=60)
    blocks = _blocks(admin_api, ns)
    assert blocks > 0
    assert tier["status"]["plan"]["scheduler"] == {
        "plugin": "cpu-prefix-cache-scorer",
        "blockSizeTokens": 16,
        "lruCapacityPerServer": blocks,
        "roles": ["decode"],
        "configMap": {"name": CONFIGMAP, "key": "epp"},
    }
    stored = _read(admin_api, ns)
    # Byte for byte the user's text but the one value (comments and flow maps kept).
    assert stored["data"]["epp"] == EPP.replace("41000", str(blocks))
    assert stored["data"]["README"] == "the router's config"
    record = json.loads(stored["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record["lruCapacityPerServer"] == {"base": 41000, "applied": blocks}
    message = next(c for c in tier["status"]["conditions"] if c["type"] == "SchedulerSynced")
    assert f"ConfigMap {CONFIGMAP} key epp" in message["message"]
    # The model server itself carries no scheduler record: the ConfigMap holds it.
    server = live(admin_api, ns, _server())
    assert "scheduler" not in json.loads(server["metadata"]["annotations"][APPLIED])


def test_a_closed_namespace_gets_the_value_and_the_grant_and_nothing_is_written(
    admin_api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    ns = namespaces["closed"]
    tier = wait_condition(
        admin_api, ns, "qwen", "SchedulerSynced", "False", "SchedulerConfigRef", timeout=60
    )
    message = next(c for c in tier["status"]["conditions"] if c["type"] == "SchedulerSynced")
    assert f"lruCapacityPerServer: {_blocks(admin_api, ns)}" in message["message"]
    assert GRANT_VALUE in message["message"] and "(403)" in message["message"]
    stored = _read(admin_api, ns)
    assert stored["data"]["epp"] == EPP
    assert RECORD_ANNOTATION not in (stored["metadata"].get("annotations") or {})
    assert [m["manager"] for m in stored["metadata"]["managedFields"]] == [ARGO]
    assert "scheduler" not in tier["status"]["plan"]


def _can(api: client.ApiClient, verb: str, resource: str, ns: str) -> bool:
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=ns
            )
        )
    )
    result = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status.allowed)


def test_the_operator_may_patch_configmaps_only_where_opted_in(
    operator_api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    assert _can(operator_api, "patch", "configmaps", namespaces["opted"])
    for ns in (namespaces["closed"], "default", "kube-system", "kvtier-system"):
        assert not _can(operator_api, "patch", "configmaps", ns), ns
    for verb in ("get", "list", "patch"):
        assert not _can(operator_api, verb, "secrets", namespaces["opted"]), verb
    for verb in ("create", "delete", "update"):
        assert not _can(operator_api, verb, "configmaps", namespaces["opted"]), verb
    # A real 403, as the operator itself got it.
    with pytest.raises(client.ApiException) as denied:
        Kube(operator_api).json_patch(
            "v1",
            "ConfigMap",
            CONFIGMAP,
            namespaces["closed"],
            [{"op": "test", "path": "/data", "value": {}}],
        )
    assert denied.value.status == 403


def test_argo_re_applies_cause_no_write(
    cluster: LocalCluster,
    admin_api: client.ApiClient,
    namespaces: dict[str, str],
    operator: OperatorProcess,
) -> None:
    ns = namespaces["opted"]
    wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=60)
    before = _read(admin_api, ns)
    time.sleep(2)
    start = time.time()
    for _ in range(ROUNDS):
        _argo_configmap(admin_api, ns, _configmap())
        argo_sync(admin_api, ns, _server())
    operator.wait_resyncs()  # what the syncs left is looked at again, twice
    names: list[str] = []
    writes = audit.writes(cluster.audit_log, since=start, names=names, namespace=ns)
    assert sum(writes.values()) == 0, names  # not even a status write or an Event
    after = _read(admin_api, ns)
    assert after["data"] == before["data"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    # Without the ConfigMap's ignoreDifferences a sync takes the value back: kvtier writes
    # it again (this is the war deploy/argocd/application.yaml prevents).
    _apply_as_argo(admin_api, ns, _configmap())
    eventually(
        lambda: _read(admin_api, ns)["data"]["epp"] == before["data"]["epp"],
        what="kvtier's value back",
    )


def test_a_concurrent_edit_is_not_clobbered(
    admin_api: client.ApiClient, operator_api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    ns = namespaces["opted"]
    tier = wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=60)
    blocks = _blocks(admin_api, ns)
    # kvtier reads the ConfigMap with the user's value back in it (git's text) and renders
    # its patch, by the operator's own functions; the user edits the text before it arrives.
    read = _read(admin_api, ns)
    read["data"]["epp"] = EPP
    (plan,) = tier["status"]["plan"]["roles"]
    per_token = tier["status"]["sizing"]["bytesPerToken"]
    cpu = plan["cpuBytesToUse"]
    decode = RoleOffload(
        "decode", ("template",), ConnectorSettings(16), cpu, 0, None, per_token, cpu
    )
    server = live(admin_api, ns, _server())
    layout = picker_layout(server, {})  # its own annotation
    sync = configmap_sync(server, read, [decode], tier_id(ns, "qwen"), layout)
    assert isinstance(sync, SchedulerSync) and sync.capacity == blocks
    (write,) = configmap_writes(read, sync, tier_id(ns, "qwen"))
    edited = EPP.replace("weight: 2", "weight: 3")
    replace = [{"op": "replace", "path": "/data/epp", "value": edited}]
    Kube(admin_api).json_patch("v1", "ConfigMap", CONFIGMAP, ns, replace)
    with pytest.raises(client.ApiException) as refused:
        Kube(operator_api).json_patch("v1", "ConfigMap", CONFIGMAP, ns, write.body["jsonPatch"])
    assert refused.value.status == 422  # the test op on the exact text read
    # The running operator re-reads: the user's edit stays, kvtier's value comes back in it.
    want = edited.replace("41000", str(blocks))
    eventually(lambda: _read(admin_api, ns)["data"]["epp"] == want, what="edit kept, value set")


def _moved(name: str) -> dict[str, Any]:
    server = _server()
    server["spec"]["router"]["scheduler"]["config"]["ref"]["name"] = name
    return server


def test_a_configmap_the_server_no_longer_names_gets_the_users_text_back(
    admin_api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    ns = namespaces["opted"]
    wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=60)
    blocks = _blocks(admin_api, ns)
    text = _read(admin_api, ns)["data"]["epp"]
    user_text = text.replace(f"lruCapacityPerServer: {blocks}", "lruCapacityPerServer: 41000")
    _apply_as_argo(admin_api, ns, {**_configmap(), "metadata": {"name": "qwen-epp-v2"}})
    argo_sync(admin_api, ns, _moved("qwen-epp-v2"))

    def moved() -> bool:
        old, new = _read(admin_api, ns), _read(admin_api, ns, "qwen-epp-v2")
        return (
            old["data"]["epp"] == user_text
            and RECORD_ANNOTATION not in (old["metadata"].get("annotations") or {})
            and new["data"]["epp"] == EPP.replace("41000", str(blocks))
        )

    eventually(moved, what="the old ConfigMap given back, the new one written")
    argo_sync(admin_api, ns, _server())  # back to the first: the second is given back
    eventually(
        lambda: (
            _read(admin_api, ns, "qwen-epp-v2")["data"]["epp"] == EPP
            and _read(admin_api, ns)["data"]["epp"] == text
        ),
        what="the ref back",
    )


def test_deleting_the_tier_gives_the_users_text_back_exactly(
    admin_api: client.ApiClient, namespaces: dict[str, str]
) -> None:
    ns = namespaces["opted"]
    wait_condition(admin_api, ns, "qwen", "SchedulerSynced", "True", timeout=60)
    text = _read(admin_api, ns)["data"]["epp"]
    user_text = text.replace(
        f"lruCapacityPerServer: {_blocks(admin_api, ns)}", "lruCapacityPerServer: 41000"
    )
    assert user_text != text
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "qwen"
    )
    restored = eventually(
        lambda: (
            (c := _read(admin_api, ns))
            and RECORD_ANNOTATION not in (c["metadata"].get("annotations") or {})
            and c
        ),
        what="the record gone",
    )
    assert restored["data"]["epp"] == user_text
    assert plugin_parameters(restored["data"]["epp"]) == {
        "autoTune": False,
        "lruCapacityPerServer": 41000,
    }
    # The closed namespace's ConfigMap was never touched.
    assert _read(admin_api, namespaces["closed"])["data"]["epp"] == EPP


def _rendered(cluster: LocalCluster, *sets: str) -> list[dict[str, Any]]:
    args = [a for s in sets for a in ("--set", s)]
    out = helm(cluster, "template", "kvtier-operator", str(CHART), "-n", "kvtier-system", *args)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_the_chart_grants_each_listed_namespace_alone(cluster: LocalCluster) -> None:
    """A Role and RoleBinding per opted-in namespace, with get and patch on ConfigMaps only;
    none by default; the ClusterRole never changes ConfigMaps; a bad name is refused."""
    docs = _rendered(cluster, "schedulerConfigMaps.namespaces={team-a,team-b}")
    grants = [d for d in docs if d["metadata"]["name"].endswith("-scheduler-configmaps")]
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in grants) == [
        ("Role", "team-a"),
        ("Role", "team-b"),
        ("RoleBinding", "team-a"),
        ("RoleBinding", "team-b"),
    ]
    for d in grants:
        if d["kind"] == "Role":
            assert d["rules"] == [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]}
            ]
        else:
            assert d["subjects"] == [
                {"kind": "ServiceAccount", "name": "kvtier-operator", "namespace": "kvtier-system"}
            ]
    default = _rendered(cluster)
    assert not [d for d in default if d["metadata"]["name"].endswith("-scheduler-configmaps")]
    (cluster_role,) = [
        d
        for d in default
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kvtier-operator"
    ]
    for rule in cluster_role["rules"]:
        if "configmaps" in rule.get("resources", []):
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    proc = helm(
        cluster,
        "template",
        "x",
        str(CHART),
        "--set",
        "schedulerConfigMaps.namespaces={Bad_NS}",
        check=False,
    )
    assert proc.returncode != 0 and "/schedulerConfigMaps/namespaces/0" in proc.stderr, proc.stderr
