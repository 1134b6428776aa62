"""kvtier against KServe's own CRDs (v0.20, from its Go module; hack/localcluster/upstream-crds):
the user's own volumes, env, args and spec survive kvtier's writes, 50 Argo-CD-like forced
re-applies and the tier's removal; nothing loops; KServe's minimal CRDs (an atomic spec) are
refused without a write; an LLMInferenceService that others write as v1alpha1 gets the form
that survives their writes.

The Argo CD sync is played here (Argo CD itself does not run on this machine): a forced
server-side apply by manager argocd-controller of the user's manifest into which, as
RespectIgnoreDifferences does, the live value of every field selected by the jqPathExpressions
of deploy/argocd/application.yaml has been carried (a list holding a selected item is carried
whole, as Argo CD's JSON merge patch does). The expressions are evaluated by jq itself.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import jq
import pytest
import yaml
from kubernetes import client

from kvtier.controller.schemas import SchemaWatch, document_url
from kvtier.kube.rest import Kube
from kvtier.render.served_schema import resolve
from localcluster import LocalCluster, upstream_crds
from tests.conftest import api_client
from tests.e2e import audit
from tests.e2e.conftest import inference_service, llm_inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY
from tests.served_schemas import kind_document, served_schema

REPO = Path(__file__).resolve().parents[2]
ARGO = "argocd-controller"
ROUNDS = 50
PLURALS = {"InferenceService": "inferenceservices", "LLMInferenceService": "llminferenceservices"}
APPLIED = "kvcache.io/applied"


def _ignored_paths() -> dict[str, list[str]]:
    docs = yaml.safe_load_all((REPO / "deploy" / "argocd" / "application.yaml").read_text())
    tiers = next(d for d in docs if d["metadata"]["name"] == "kvtier-tiers")
    return {
        d["kind"]: list(d.get("jqPathExpressions") or [])
        for d in tiers["spec"]["ignoreDifferences"]
    }


IGNORED = _ignored_paths()


def _path(api_version: str, kind: str, ns: str, name: str = "") -> str:
    group, version = api_version.split("/")
    base = f"/apis/{group}/{version}/namespaces/{ns}/{PLURALS[kind]}"
    return f"{base}/{name}" if name else base


def live(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    path = _path(body["apiVersion"], body["kind"], ns, body["metadata"]["name"])
    return cast(dict[str, Any], Kube(api).request("GET", path))


_ABSENT = object()


def _at(obj: Any, path: list[Any]) -> Any:
    for key in path:
        if (isinstance(obj, dict) and key in obj) or (isinstance(obj, list) and key < len(obj)):
            obj = obj[key]
        else:
            return _ABSENT  # jq gives paths of absent keys too; Argo CD carries nothing then
    return obj


def _put(obj: Any, path: list[Any], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {}) if isinstance(obj, dict) else obj[key]
    obj[path[-1]] = copy.deepcopy(value)


@functools.cache
def _paths_of(expression: str) -> Any:
    """The jq program giving the paths `expression` selects, compiled once: every sync of
    the idle windows applies each one."""
    return jq.compile(f"[path({expression})]")


def respecting_ignored(manifest: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The manifest as Argo CD applies it with RespectIgnoreDifferences (module docstring)."""
    desired = copy.deepcopy(manifest)
    for expression in IGNORED[manifest["kind"]]:
        paths = _paths_of(expression).input_value(current).first()
        for path in paths:
            keep = path[:-1] if isinstance(path[-1], int) else path
            value = _at(current, keep)
            if value is not _ABSENT:
                _put(desired, keep, value)
    return desired


def argo_sync(api: client.ApiClient, ns: str, manifest: dict[str, Any]) -> None:
    """One self-heal sync: a forced apply by Argo CD's manager."""
    try:
        current = live(api, ns, manifest)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        current = {}
    body = respecting_ignored(manifest, current) if current else copy.deepcopy(manifest)
    body["metadata"] = {**body["metadata"], "namespace": ns}
    Kube(api).request(
        "PATCH",
        _path(manifest["apiVersion"], manifest["kind"], ns, manifest["metadata"]["name"]),
        json.dumps(body),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": ARGO, "force": "true"},
    )


def target_writes(cluster: LocalCluster, kind: str, since: float) -> int:
    writes = audit.writes(cluster.audit_log, since=since)
    return sum(n for (verb, res), n in writes.items() if res == PLURALS[kind])


def _user_isvc() -> dict[str, Any]:
    user = inference_service(
        "llama-70b", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct", max_replicas=1
    )
    pred = user["spec"]["predictor"]
    pred["volumes"] = [{"name": "chat-templates", "configMap": {"name": "llama-chat-templates"}}]
    pred["model"]["volumeMounts"] = [
        {"name": "chat-templates", "mountPath": "/opt/app-root/templates"}
    ]
    return user


def _user_fields_intact(current: dict[str, Any], user: dict[str, Any]) -> None:
    """Every field of the user's manifest is still there (lists: the user's items, in order,
    beside kvtier's); only memory may differ, which kvtier raises by design."""
    want, have = user["spec"]["predictor"], current["spec"]["predictor"]
    users = [v["name"] for v in want["volumes"]]
    assert [v for v in have["volumes"] if v["name"] in users] == want["volumes"]
    model, got = want["model"], have["model"]
    assert got["args"][: len(model["args"])] == model["args"]
    assert all(e in got["env"] for e in model["env"])
    assert all(m in got["volumeMounts"] for m in model["volumeMounts"])
    assert (got["modelFormat"], got["storageUri"]) == (model["modelFormat"], model["storageUri"])
    assert (
        got["resources"]["limits"]["nvidia.com/gpu"]
        == model["resources"]["limits"]["nvidia.com/gpu"]
    )


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "contracts")


def test_inference_service_keeps_the_users_lists_through_argo_and_removal(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    user = _user_isvc()
    argo_sync(admin_api, ns, user)
    create_tier(
        admin_api,
        ns,
        "llama",
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": "llama-70b"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 32},
            "disk": {"type": "NVMe", "nvme": {"pool": "local-nvme", "size": "1Ti"}},
            "probe": {"enabled": False},
        },
    )
    wait_condition(admin_api, ns, "llama", "Applied", "True", timeout=90)
    converged = live(admin_api, ns, user)
    _user_fields_intact(converged, user)
    volumes = {v["name"]: v for v in converged["spec"]["predictor"]["volumes"]}
    # The claim template as stored: nothing kvtier wrote was pruned.
    assert set(volumes) == {"chat-templates", "kvtier-dshm", "kvtier-kv-cache"}
    template = volumes["kvtier-kv-cache"]["ephemeral"]["volumeClaimTemplate"]
    assert "labels" not in (template.get("metadata") or {})
    generation = converged["metadata"]["generation"]
    time.sleep(2)

    start = time.time()
    for _ in range(ROUNDS):
        argo_sync(admin_api, ns, user)
    operator.wait_resyncs()  # what the syncs left is looked at again, twice
    after = live(admin_api, ns, user)
    _user_fields_intact(after, user)
    assert APPLIED in after["metadata"]["annotations"]
    assert "--kv-transfer-config" in after["spec"]["predictor"]["model"]["args"]
    assert target_writes(cluster, "InferenceService", start) == 0
    assert after["metadata"]["generation"] == generation  # the syncs changed nothing either


def cpu_tier_under_argo(
    cluster: LocalCluster,
    operator: OperatorProcess,
    api: client.ApiClient,
    ns: str,
    user: dict[str, Any],
) -> dict[str, Any]:
    """Argo CD creates the LLMInferenceService, a CPU tier applies to it, then Argo CD syncs
    ROUNDS times: kvtier writes nothing to it meanwhile, nor in two periodic passes after.
    The target after the syncs."""
    name = user["metadata"]["name"]
    argo_sync(api, ns, user)
    create_tier(
        api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"kind": "LLMInferenceService", "name": name},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
            "disk": {"type": "None"},
        },
    )
    wait_condition(api, ns, name, "Applied", "True", timeout=90)
    time.sleep(2)
    start = time.time()
    for _ in range(ROUNDS):
        argo_sync(api, ns, user)
    operator.wait_resyncs()
    assert target_writes(cluster, "LLMInferenceService", start) == 0
    return live(api, ns, user)


def test_llmisvc_written_as_v1alpha1_gets_the_form_that_survives(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    user = llm_inference_service(
        "gptoss",
        tp=2,
        model_uri="hf://openai/gpt-oss-120b",
        api_version="serving.kserve.io/v1alpha1",
    )
    after = cpu_tier_under_argo(cluster, operator, admin_api, ns, user)
    v2 = live(admin_api, ns, {**user, "apiVersion": "serving.kserve.io/v1alpha2"})
    assert "kvCacheOffloading" not in v2["spec"]  # it would not survive a v1alpha1 write
    main = next(c for c in after["spec"]["template"]["containers"] if c["name"] == "main")
    env = {e["name"]: e.get("value") for e in main.get("env") or []}
    assert "--kv-transfer-config '" in env["VLLM_ADDITIONAL_ARGS"]
    assert main["image"] == user["spec"]["template"]["containers"][0]["image"]


def test_llmisvc_v1alpha2_native_field_survives_argo(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    user = llm_inference_service(
        "nemotron", tp=8, model_uri="hf://nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
    )
    after = cpu_tier_under_argo(cluster, operator, admin_api, ns, user)
    assert "kvCacheOffloading" in after["spec"]


def test_no_operator_write_after_convergence_over_two_resyncs(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, operator: OperatorProcess
) -> None:
    """All three target kinds and forms at once: an NVMe tier on an InferenceService, a
    CPU tier on LLMInferenceServices written as v1alpha1 and as v1alpha2; the window spans
    two of the operator's periodic passes over every tier."""
    for name in ("llama", "gptoss", "nemotron"):
        wait_condition(admin_api, ns, name, "Ready", "True", timeout=90)
    names: list[str] = []
    writes = audit.idle_writes(cluster.audit_log, operator, names=names, namespace=ns)
    assert sum(writes.values()) == 0, names


def test_removal_gives_the_inference_service_back(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str
) -> None:
    user = _user_isvc()
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "llama"
    )
    restored = eventually(
        lambda: (
            (t := live(admin_api, ns, user))
            and APPLIED not in (t["metadata"].get("annotations") or {})
            and t
        ),
        what="the tier's removal",
    )
    pred, model = restored["spec"]["predictor"], restored["spec"]["predictor"]["model"]
    assert pred["volumes"] == user["spec"]["predictor"]["volumes"]
    assert model["args"] == user["spec"]["predictor"]["model"]["args"]
    assert model["volumeMounts"] == user["spec"]["predictor"]["model"]["volumeMounts"]
    assert model["env"] == user["spec"]["predictor"]["model"]["env"]
    assert model["resources"]["limits"]["memory"] == "256Gi"
    # Argo CD keeps syncing: nothing of kvtier's comes back, nothing of the user's goes.
    for _ in range(5):
        argo_sync(admin_api, ns, user)
    again = live(admin_api, ns, user)
    assert again["spec"]["predictor"]["volumes"] == user["spec"]["predictor"]["volumes"]
    assert again["spec"]["predictor"]["model"]["args"] == model["args"]
    assert APPLIED not in (again["metadata"].get("annotations") or {})


# --- KServe's minimal CRDs: spec is an atomic map ------------------------------------------------


@pytest.fixture(scope="module")
def minimal() -> Iterator[tuple[LocalCluster, OperatorProcess, float]]:
    workdir = Path(tempfile.mkdtemp(prefix="kvtier-minimal-"))
    local = LocalCluster(workdir)
    proc = None
    try:
        local.up()
        local.install_crds(REPO / "deploy" / "crds", upstream_crds("minimal"))
        proc = OperatorProcess(local, workdir / "operator.log").start()
        yield local, proc, time.time()
    finally:
        if proc is not None:
            proc.stop()
        local.down()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.parametrize(
    "user",
    [
        inference_service("llama", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct"),
        # The minimal LLMInferenceService CRD keeps v1alpha2 structural; v1alpha1 is atomic.
        llm_inference_service(
            "nemotron",
            tp=8,
            model_uri="hf://nvidia/Nemotron",
            api_version="serving.kserve.io/v1alpha1",
        ),
    ],
    ids=["InferenceService", "LLMInferenceService-v1alpha1"],
)
def test_minimal_crds_atomic_spec_is_refused_without_a_write(
    minimal: tuple[LocalCluster, OperatorProcess, float], user: dict[str, Any]
) -> None:
    local, proc, _ = minimal
    api = api_client(local.admin_kubeconfig)
    ns = new_namespace(api, "minimal")
    argo_sync(api, ns, user)
    before = live(api, ns, user)
    start = time.time()
    create_tier(
        api,
        ns,
        "t",
        {
            "mode": "Apply",
            "targetRef": {"kind": user["kind"], "name": user["metadata"]["name"]},
            "model": {"name": "llama-3.1-70b"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
            "disk": {"type": "None"},
        },
    )
    try:
        tier = wait_condition(api, ns, "t", "Applied", "False", "AtomicSpec")
    except AssertionError as exc:
        got = get_tier(api, ns, "t").get("status", {}).get("conditions")
        raise AssertionError(f"{exc}; conditions {got}") from None
    message = next(c for c in tier["status"]["conditions"] if c["type"] == "Applied")["message"]
    assert "atomic" in message and "full CRDs" in message
    proc.wait_resyncs()  # the periodic passes refuse it again, without a write
    after = live(api, ns, user)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert target_writes(local, user["kind"], start) == 0


def _restorable_isvc(name: str) -> dict[str, Any]:
    """An InferenceService with every kind of field a user sets (and one no schema knows)."""
    user = inference_service(
        name, tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct", max_replicas=3
    )
    pred = user["spec"]["predictor"]
    pred["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pred["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pred["volumes"] = [{"name": "chat-templates", "configMap": {"name": "templates"}}]
    pred["model"]["volumeMounts"] = [{"name": "chat-templates", "mountPath": "/templates"}]
    pred["model"]["resources"]["limits"]["memory"] = "48Gi"
    pred["somethingNew"] = {"kept": "yes"}
    return user


def _objects(api: client.ApiClient, ns: str, name: str) -> str:
    return _path("serving.kserve.io/v1beta1", "InferenceService", ns, name)


def _made_by(api: client.ApiClient, ns: str, user: dict[str, Any], how: str) -> None:
    """The InferenceService as `how` leaves it, then its managedFields emptied, as backup
    and restore tools and some GitOps tools leave objects."""
    kube = Kube(api)
    name = user["metadata"]["name"]
    body = {**user, "metadata": {**user["metadata"], "namespace": ns}}
    if how == "apply":
        kube.request(
            "PATCH",
            _objects(api, ns, name),
            json.dumps(body),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "kubectl"},
        )
    else:
        kube.request("POST", _path(user["apiVersion"], user["kind"], ns), body)
    if how == "replace":
        current = kube.request("GET", _objects(api, ns, name))
        current["spec"] = copy.deepcopy(user["spec"])
        kube.request("PUT", _objects(api, ns, name), current)
    if how == "restore":
        dump = kube.request("GET", _objects(api, ns, name))
        kube.request("DELETE", _objects(api, ns, name))
        eventually(lambda: not _exists(kube, _objects(api, ns, name)), what="deletion")
        meta = dump["metadata"]
        for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
            meta.pop(key, None)
        kube.request("POST", _path(user["apiVersion"], user["kind"], ns), dump)
    kube.request(
        "PATCH",
        _objects(api, ns, name),
        {"metadata": {"managedFields": [{}]}},
        content_type="application/merge-patch+json",
    )


def _exists(kube: Kube, path: str) -> bool:
    try:
        kube.request("GET", path)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_minimal_crds_lose_nothing_when_managed_fields_are_stripped(
    minimal: tuple[LocalCluster, OperatorProcess, float],
) -> None:
    """The schema as served says spec is atomic, whatever the object's managedFields say:
    objects made by create, apply, replace and a backup restore, their managedFields
    emptied, get an Apply tier; not one of the user's fields is lost, Ready is never True,
    kvtier writes nothing to them, and after the tier's deletion the spec is the user's."""
    local, _, _ = minimal
    api = api_client(local.admin_kubeconfig)
    ns = new_namespace(api, "stripped")
    hows = ("create", "apply", "replace", "restore")
    users = {how: _restorable_isvc(f"llama-{how}") for how in hows}
    for how, user in users.items():
        _made_by(api, ns, user, how)
        stripped = live(api, ns, user)
        entries = stripped["metadata"].get("managedFields") or []
        assert not any(e.get("fieldsV1") for e in entries)
        assert stripped["spec"] == user["spec"]
    start = time.time()
    for how, user in users.items():
        create_tier(
            api,
            ns,
            how,
            {
                "mode": "Apply",
                "targetRef": {"kind": "InferenceService", "name": user["metadata"]["name"]},
                "model": {"name": "llama-3.1-70b"},
                "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
                "disk": {"type": "None"},
            },
        )
    for how in hows:
        tier = wait_condition(api, ns, how, "Applied", "False", "AtomicSpec", timeout=90)
        ready = next(c for c in tier["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "AtomicSpec")
    # Watched for a while: Ready never turns True, and the targets keep the user's spec.
    deadline = time.time() + 10
    while time.time() < deadline:
        for how in hows:
            ready = next(
                c for c in get_tier(api, ns, how)["status"]["conditions"] if c["type"] == "Ready"
            )
            assert ready["status"] == "False", (how, ready)
        time.sleep(1)
    for user in users.values():
        assert live(api, ns, user)["spec"] == user["spec"]
    assert target_writes(local, "InferenceService", start) == 0
    custom = client.CustomObjectsApi(api)
    for how in hows:
        custom.delete_namespaced_custom_object("kvcache.io", "v1alpha1", ns, "kvcachetiers", how)
    kube = Kube(api)
    for how in hows:
        gone = functools.partial(_absent, kube, _tier_path(ns, how))
        eventually(gone, what="tier deletion")
    for user in users.values():
        after = live(api, ns, user)
        assert after["spec"] == user["spec"]
        assert APPLIED not in (after["metadata"].get("annotations") or {})
    assert target_writes(local, "InferenceService", start) == 0


def _defines(schema: Any, api_version: str, kind: str) -> bool:
    gvks = schema.get("x-kubernetes-group-version-kind") or []
    return any(
        f"{g.get('group')}/{g.get('version')}" == api_version and g.get("kind") == kind
        for g in gvks
    )


def _document(kube: Kube, url: str) -> Any:
    path, _, query = url.partition("?")
    return kube.request("GET", path, query=dict([query.split("=", 1)]))


def _absent(kube: Kube, path: str) -> bool:
    return not _exists(kube, path)


def _tier_path(ns: str, name: str) -> str:
    return f"/apis/kvcache.io/v1alpha1/namespaces/{ns}/kvcachetiers/{name}"


def test_minimal_crds_see_no_target_write_from_the_start_through_two_resyncs(
    minimal: tuple[LocalCluster, OperatorProcess, float],
) -> None:
    """From the operator's start, through the refused tiers above, to two more periodic
    passes over every tier: not one write to a target of the atomic-spec CRDs."""
    local, proc, started = minimal
    proc.wait_resyncs()
    for kind in PLURALS:
        assert target_writes(local, kind, started) == 0


@pytest.mark.parametrize(
    "api_version,kind",
    [
        ("serving.kserve.io/v1beta1", "InferenceService"),
        ("serving.kserve.io/v1alpha1", "LLMInferenceService"),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService"),
    ],
)
def test_the_served_schema_is_the_crds_own(
    cluster: LocalCluster,
    crds: None,
    minimal: tuple[LocalCluster, OperatorProcess, float],
    api_version: str,
    kind: str,
) -> None:
    """What the unit tests read as the served schema (tests/served_schemas.py, from the CRD
    files) is what a real API server serves at /openapi/v3 for KServe's full and minimal
    CRDs, as the operator reads it (SchemaWatch.schema_of)."""
    for variant, local in (("full", cluster), ("minimal", minimal[0])):
        kube = Kube(api_client(local.admin_kubeconfig))

        watch = SchemaWatch(
            functools.partial(kube.request, "GET", "/openapi/v3"),
            lambda _: None,
            read_document=functools.partial(_document, kube),
        )
        served = watch.schema_of(api_version, kind)
        assert served is not None, (variant, api_version, kind)
        expected = served_schema(api_version, kind, variant)
        assert served["properties"]["spec"] == expected["properties"]["spec"], variant
        # The whole schema too, not only the merge shape the operator keeps of it.
        url = document_url(kube.request("GET", "/openapi/v3"), api_version)
        assert url is not None
        components = _document(kube, url)["components"]["schemas"]
        files = kind_document(api_version, kind, variant)["components"]["schemas"]
        whole = next(s for s in components.values() if _defines(s, api_version, kind))
        from_files = next(s for s in files.values() if _defines(s, api_version, kind))
        assert (
            resolve(components, whole)["properties"]["spec"]
            == resolve(files, from_files)["properties"]["spec"]
        ), variant
