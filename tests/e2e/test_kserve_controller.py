"""KServe's own LLMInferenceService controller on the local control plane, beside kvtier's
operator: the Deployment and LeaderWorkerSets KServe writes for an LLMInferenceService carry
the tier kvtier sized, and go back to KServe's rendering of the user's object when the tier
goes.

The manager is KServe v0.20.0's cmd/llmisvc, built from its module
(``hack/oracles/kserve/build --controller``) and run as a process with the identity, CRDs,
configuration and webhooks KServe's own config/ declares (hack/localcluster/kserve_controller.py;
its webhooks are served for real, on 127.0.0.1). The vLLM command line is the Deployment's
own command run by bash with a stub ``vllm``, as the oracle harness does; what the real
controller writes is compared with what the oracle harness renders for the same stored object.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from kvtier.kube.rest import Kube
from kvtier.names.objects import DSHM_VOLUME
from kvtier.render.quantities import quantity_to_bytes
from kvtier.targets.pod import KV_FLAG
from tests.e2e import audit
from tests.e2e.conftest import KServeStack, create_target, llm_inference_service
from tests.e2e.kube_helpers import (
    create_tier,
    eventually,
    exists,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.test_kserve_offload import VLLM, oracle, render
from tests.e2e.test_llmd_roles import USER_MEMORY, WORKLOADS, _tier, multi_node, prefill_decode
from tests.e2e.test_operator_apply import NEMOTRON, POLICY, POOL, STUDY

__all__ = ["oracle"]  # the fixture that builds the oracle harness (test_kserve_offload.py)

# A cold build of the manager downloads KServe's module graph (minutes on a fresh cache).
pytestmark = pytest.mark.timeout(1800)

EXTRA = "kv_connector_extra_config"
# LeaderWorkerSet's controller puts the leader's address in every pod of a group (none runs
# here): the commands are run with it, as test_llmd_roles.py runs the oracle.
LWS_ENV = {"LWS_LEADER_ADDRESS": "localhost"}
# The user's LLMInferenceService of the README (single node, TP 8, llm-d router).
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "targets" / "nemotron-llmisvc.yaml"


def _get(api: client.ApiClient, path: str) -> dict[str, Any]:
    return cast(dict[str, Any], Kube(api).request("GET", path))


def workloads(api: client.ApiClient, ns: str, name: str) -> dict[tuple[str, str, str], Any]:
    """The pod specs of the workloads KServe wrote for LLMInferenceService `name`, keyed as
    the oracle harness reports them: (kind, name, role) with role pod, leader or worker."""
    out: dict[tuple[str, str, str], Any] = {}
    deployments = _get(api, f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
    sets = _get(api, f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets")
    for kind, obj in [
        *(("Deployment", d) for d in deployments),
        *(("LeaderWorkerSet", s) for s in sets["items"]),
    ]:
        owners = obj["metadata"].get("ownerReferences") or []
        if not any(o["kind"] == "LLMInferenceService" and o["name"] == name for o in owners):
            continue
        key = obj["metadata"]["name"]
        if kind == "Deployment":
            out["Deployment", key, "pod"] = obj["spec"]["template"]["spec"]
            continue
        templates = obj["spec"]["leaderWorkerTemplate"]
        if "leaderTemplate" in templates:
            out["LeaderWorkerSet", key, "leader"] = templates["leaderTemplate"]["spec"]
        out["LeaderWorkerSet", key, "worker"] = templates["workerTemplate"]["spec"]
    return out


def container(spec: dict[str, Any], name: str = "main") -> dict[str, Any]:
    [found] = [c for c in spec["containers"] if c["name"] == name]
    return cast(dict[str, Any], found)


def vllm_argv(ctr: dict[str, Any], version: str = VLLM) -> list[str]:
    """The words vLLM gets: the container's command and args run by bash with its literal env
    and a stub `vllm` first on PATH (it answers --version and records the rest)."""
    with tempfile.TemporaryDirectory(prefix="kserve-vllm-") as tmp:
        stub = Path(tmp) / "vllm"
        stub.write_text(
            f"#!{sys.executable}\n"
            "import json, os, sys\n"
            "if sys.argv[1:] == ['--version']:\n"
            "    print(os.environ['STUB_VLLM_VERSION'])\n"
            "else:\n"
            "    open(os.environ['STUB_VLLM_ARGV'], 'w').write(json.dumps(sys.argv[1:]))\n"
        )
        stub.chmod(0o755)
        argv_file = Path(tmp) / "argv.json"
        env = {**LWS_ENV, **{e["name"]: e["value"] for e in ctr.get("env") or [] if "value" in e}}
        env |= {
            "PATH": f"{tmp}:/usr/local/bin:/usr/bin:/bin",
            "STUB_VLLM_VERSION": version,
            "STUB_VLLM_ARGV": str(argv_file),
        }
        words = [*(ctr.get("command") or []), *(ctr.get("args") or [])]
        proc = subprocess.run(words, env=env, cwd=tmp, capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and argv_file.exists(), proc.stderr[-3000:]
        argv: list[str] = json.loads(argv_file.read_text())
        return argv


def kv_transfer_config(argv: list[str]) -> Any:
    """The last --kv-transfer-config's JSON (vLLM's argparse keeps the last), None if none."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == KV_FLAG]
    values += [a.split("=", 1)[1] for a in argv if a.startswith(f"{KV_FLAG}=")]
    return json.loads(values[-1]) if values else None


def stored(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    """The object as v1alpha2 (KServe's conversion webhook converts one written as v1alpha1)."""
    return _get(
        api, f"/apis/serving.kserve.io/v1alpha2/namespaces/{ns}/llminferenceservices/{name}"
    )


def settled(
    api: client.ApiClient,
    ns: str,
    name: str,
    want: Callable[[dict[tuple[str, str, str], Any]], bool],
    what: str,
) -> dict[tuple[str, str, str], Any]:
    """KServe's workloads for `name` once they satisfy `want` (it reconciles after kvtier)."""
    found: dict[tuple[str, str, str], Any] = eventually(
        lambda: (w := workloads(api, ns, name)) and want(w) and w, timeout=90, what=what
    )
    return found


# What kube-apiserver fills in a pod template (the harness's fake client fills nothing):
# (key, value) pairs dropped from both sides before they are compared; None for any value.
SERVER_DEFAULTS: dict[str, Any] = {
    "terminationMessagePath": "/dev/termination-log",
    "imagePullPolicy": None,  # from the image's tag
    "defaultMode": 420,
    "successThreshold": 1,
}
# KServe gives the storage-initializer Hugging Face's download settings once it has the pod's
# ServiceAccount (attachHfModelArtifact); for a pod without one of KServe's own (the
# single-node Deployment) it reads the namespace's `default`, which kube-controller-manager
# makes in every namespace and the harness's fake cluster lacks: there the harness has none.
HF_DOWNLOAD_ENV = [
    {"name": "HF_HUB_ENABLE_HF_TRANSFER", "value": "1"},
    {"name": "HF_XET_HIGH_PERFORMANCE", "value": "1"},
    {"name": "HF_XET_NUM_CONCURRENT_RANGE_GETS", "value": "8"},
]


def without_server_defaults(value: Any) -> Any:
    if isinstance(value, list):
        return [without_server_defaults(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in SERVER_DEFAULTS and SERVER_DEFAULTS[k] in (None, v):
            continue
        if k == "fieldRef" and v.get("apiVersion") == "v1":
            v = {f: x for f, x in v.items() if f != "apiVersion"}
        out[k] = without_server_defaults(v)
    return out


def assert_oracle_agrees(oracle: Path, api: client.ApiClient, ns: str, name: str) -> None:
    """The oracle harness, given the stored object, renders what KServe's controller wrote:
    the same workloads, volumes and init containers, and per container the same env, mounts,
    resources and vLLM command line, but for the API server's defaults and HF_DOWNLOAD_ENV."""
    obj = stored(api, ns, name)
    spec = obj["spec"]
    # As LeaderWorkerSet's controller would inject it into a group's pods (none runs here).
    for group in (spec, spec.get("prefill") or {}):
        if "worker" in group:
            for template in (group["template"], group["worker"]):
                container(template).setdefault("env", []).extend(
                    {"name": k, "value": v} for k, v in LWS_ENV.items()
                )
    meta = {"name": name, "namespace": ns}
    out = render(
        oracle,
        {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, "spec": spec},
    )
    real = workloads(api, ns, name)
    rendered = {(w["kind"], w["name"], w["role"]): w for w in out["workloads"]}
    assert rendered.keys() == real.keys()
    argvs = 0
    for key, workload in rendered.items():
        pod = without_server_defaults(real[key])
        by_name = {v["name"]: v for v in pod.get("volumes") or []}
        assert {v["name"]: v for v in without_server_defaults(workload["volumes"] or [])} == (
            by_name
        ), key
        init = without_server_defaults(workload["initContainers"] or [])
        for ctr in init:
            env = ctr.get("env", [])
            if ctr["name"] == "storage-initializer" and not any(e in HF_DOWNLOAD_ENV for e in env):
                ctr["env"] = [*env, *HF_DOWNLOAD_ENV]
        assert init == (pod.get("initContainers") or []), key
        for ctr in without_server_defaults(workload["containers"]):
            ours = container(pod, ctr["name"])
            env = [e for e in ctr["env"] or [] if e["name"] not in LWS_ENV]
            assert env == (ours.get("env") or []), (key, ctr["name"])
            assert (ctr["volumeMounts"] or []) == (ours.get("volumeMounts") or []), key
            assert ctr["resources"] == ours.get("resources", {}), key
            if ctr.get("vllmArgv"):
                assert ctr["vllmArgv"] == vllm_argv(ours), (key, ctr["name"])
                argvs += 1
    # Every vLLM pod's command line was compared (the scheduler's runs no vllm).
    assert argvs == sum(any(c["name"] == "main" for c in p["containers"]) for p in real.values())


def _disk_tier(name: str, workload: dict[str, Any], disk: dict[str, Any]) -> dict[str, Any]:
    """An Apply tier with a disk tier and no probe on LLMInferenceService `name`."""
    return {**_tier(name), "workload": workload, "disk": disk, "probe": {"enabled": False}}


def test_kserve_deploys_kvtiers_nvme_tier_and_gives_the_original_back(
    kserve_stack: KServeStack, oracle: Path
) -> None:
    """Single node: the Deployment's vLLM gets kvtier's cpu_bytes_to_use and the NVMe claim at
    the root_dir of its flag, the pod kvtier's memory and /dev/shm; the tier's removal gives
    back the Deployment KServe wrote for the user's object."""
    api, user = kserve_stack.api, yaml.safe_load(EXAMPLE.read_text())
    name = user["metadata"]["name"]
    ns = new_namespace(api, "kserve-ctl")
    user["metadata"]["namespace"] = ns
    create_target(api, ns, user)
    key = ("Deployment", f"{name}-kserve", "pod")
    original = settled(api, ns, name, lambda w: key in w, f"KServe's Deployment {key[1]}")
    assert KV_FLAG not in vllm_argv(container(original[key]))
    deployment = f"/apis/apps/v1/namespaces/{ns}/deployments/{key[1]}"
    template_meta = _get(api, deployment)["spec"]["template"]["metadata"]

    create_tier(
        api,
        ns,
        name,
        _disk_tier(name, STUDY, {"type": "NVMe", "nvme": {"pool": POOL, "size": "2Ti"}}),
    )
    tier = wait_condition(api, ns, name, "Ready", "True", "Applied", timeout=120)
    sizing = tier["status"]["sizing"]

    def has_tier(w: dict[tuple[str, str, str], Any]) -> bool:
        return any(v["name"] == "kv-cache-secondary-0" for v in w[key].get("volumes") or [])

    spec = settled(api, ns, name, has_tier, "the Deployment with the tier")[key]
    main = container(spec)
    argv = vllm_argv(main)
    assert argv.count(KV_FLAG) == 1, argv
    flag = kv_transfer_config(argv)
    assert flag["kv_connector"] == "OffloadingConnector"
    assert flag[EXTRA]["cpu_bytes_to_use"] == sizing["cpuBytesToUse"]
    [fs] = flag[EXTRA]["secondary_tiers"]
    assert fs["type"] == "fs" and fs["root_dir"] == "/mnt/kv-cache-0"
    assert "--max-model-len" in argv  # the user's own VLLM_ADDITIONAL_ARGS stay

    # The disk: kvtier's NVMe claim template, mounted where the flag points vLLM.
    [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == fs["root_dir"]]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == f"kvtier-nvme-{POOL}"
    target = stored(api, ns, name)
    [pvc] = [t["fileSystem"]["pvc"] for t in target["spec"]["kvCacheOffloading"]["secondary"]]
    assert claim == pvc["spec"]

    # Memory and /dev/shm as kvtier sized them in spec.template.
    [ours] = target["spec"]["template"]["containers"]
    for kind in ("requests", "limits"):
        assert main["resources"][kind]["memory"] == ours["resources"][kind]["memory"]
    assert quantity_to_bytes(main["resources"]["limits"]["memory"]) > USER_MEMORY
    [shm] = [m for m in main["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert shm["name"] == DSHM_VOLUME
    [shm_volume] = [v for v in spec["volumes"] if v["name"] == DSHM_VOLUME]
    [our_shm] = [v for v in target["spec"]["template"]["volumes"] if v["name"] == DSHM_VOLUME]
    assert shm_volume["emptyDir"] == our_shm["emptyDir"]
    assert shm_volume["emptyDir"]["medium"] == "Memory"

    assert_oracle_agrees(oracle, api, ns, name)

    # The tier goes: KServe renders the user's object again, as before the tier.
    delete_tier(api, ns, name)
    back = settled(api, ns, name, lambda w: not has_tier(w), "the Deployment without the tier")
    assert back == original
    assert _get(api, deployment)["spec"]["template"]["metadata"] == template_meta


def test_kserve_mounts_kvtiers_cephfs_claim_on_every_replica(
    kserve_stack: KServeStack, oracle: Path
) -> None:
    """Three replicas share a CephFS tier: KServe's Deployment mounts kvtier's claim by name at
    the flag's root_dir, its vLLM gets kvtier's cpu_bytes_to_use and every replica kvtier's
    PYTHONHASHSEED; all of it goes with the tier."""
    api, user = kserve_stack.api, yaml.safe_load(EXAMPLE.read_text())
    name = user["metadata"]["name"]
    ns = new_namespace(api, "kserve-cephfs")
    user["metadata"]["namespace"] = ns
    user["spec"]["replicas"] = 3
    create_target(api, ns, user)
    key = ("Deployment", f"{name}-kserve", "pod")
    original = settled(api, ns, name, lambda w: key in w, f"KServe's Deployment {key[1]}")

    workload = {"averageContextTokens": 50000, "concurrentSessions": 96}
    create_tier(
        api, ns, name, _disk_tier(name, workload, {"type": "CephFS", "cephfs": {"size": "2Ti"}})
    )
    tier = wait_condition(api, ns, name, "Provisioned", "False", "ClaimPending")
    [claim] = [t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs"]
    # Play the CephFS provisioner: a matching PV; kube-controller-manager binds it.
    client.CoreV1Api(api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"cephfs-{ns}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "2Ti"},
                access_modes=["ReadWriteMany"],
                storage_class_name=POLICY["cephfs"]["storageClassName"],
                persistent_volume_reclaim_policy="Delete",
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"vol-{ns}"
                ),
            ),
        )
    )
    tier = wait_condition(api, ns, name, "Ready", "True", "Applied", timeout=120)

    def mounts_claim(w: dict[tuple[str, str, str], Any]) -> bool:
        volumes = w[key].get("volumes") or []
        return any(v.get("persistentVolumeClaim", {}).get("claimName") == claim for v in volumes)

    spec = settled(api, ns, name, mounts_claim, "the Deployment mounting the claim")[key]
    main = container(spec)
    flag = kv_transfer_config(vllm_argv(main))
    assert flag[EXTRA]["cpu_bytes_to_use"] == tier["status"]["sizing"]["cpuBytesToUse"]
    [fs] = flag[EXTRA]["secondary_tiers"]
    [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == fs["root_dir"]]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"] == {"claimName": claim}
    env = {e["name"]: e.get("value") for e in main["env"]}
    [ours] = stored(api, ns, name)["spec"]["template"]["containers"]
    assert (
        env["PYTHONHASHSEED"] == {e["name"]: e.get("value") for e in ours["env"]}["PYTHONHASHSEED"]
    )

    assert_oracle_agrees(oracle, api, ns, name)

    delete_tier(api, ns, name)
    back = settled(api, ns, name, lambda w: not mounts_claim(w), "the Deployment without it")
    assert back == original


def delete_tier(api: client.ApiClient, ns: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    eventually(lambda: not exists(lambda: get_tier(api, ns, name)), what=f"tier {name} gone")


@pytest.mark.parametrize("shape", [prefill_decode, multi_node])
def test_llmd_roles_deployed_by_kserve_carry_each_roles_figures(
    kserve_stack: KServeStack, oracle: Path, shape: Callable[[], dict[str, Any]]
) -> None:
    """Prefill/decode (a Deployment and a prefill LeaderWorkerSet) and multi-node (a
    LeaderWorkerSet, the user writing v1alpha1): every pod KServe's controller writes gets its
    role's memory and /dev/shm and its vLLM the role's cpu_bytes_to_use; all of it back to
    KServe's rendering of the user's object once the tier goes."""
    api, user = kserve_stack.api, shape()
    name = user["metadata"]["name"]
    ns = new_namespace(api, "kserve-llmd")
    create_target(api, ns, user)
    keys = {(kind, f"{name}-{suffix}", role) for kind, suffix, role in WORKLOADS[name]}
    original = settled(api, ns, name, lambda w: keys <= w.keys(), f"{sorted(keys)}")

    create_tier(api, ns, name, _tier(name))
    tier = wait_condition(api, ns, name, "Ready", "True", "Applied", timeout=120)
    roles = {t: r for r in tier["status"]["plan"]["roles"] for t in r["templates"]}
    template_of = {
        (kind, f"{name}-{suffix}", role): template
        for (kind, suffix, role), template in WORKLOADS[name].items()
    }

    def memory(pod: dict[str, Any]) -> int:
        return quantity_to_bytes(container(pod)["resources"]["requests"]["memory"])

    def sized(w: dict[tuple[str, str, str], Any]) -> bool:
        return all(
            memory(w[k]) == USER_MEMORY + roles[t]["podMemoryBytes"] for k, t in template_of.items()
        )

    real = settled(api, ns, name, sized, "every role's workload sized")
    for key, template in template_of.items():
        role, main = roles[template], container(real[key])
        flag = kv_transfer_config(vllm_argv(main))
        assert flag[EXTRA]["cpu_bytes_to_use"] == role["cpuBytesToUse"], key
        if role.get("shmBytes") is not None:
            [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == "/dev/shm"]
            [volume] = [v for v in real[key]["volumes"] if v["name"] == mount["name"]]
            assert quantity_to_bytes(volume["emptyDir"]["sizeLimit"]) == role["shmBytes"], key

    assert_oracle_agrees(oracle, api, ns, name)

    delete_tier(api, ns, name)
    back = settled(
        api, ns, name, lambda w: all(memory(w[k]) == USER_MEMORY for k in template_of), "given back"
    )
    assert {k: back[k] for k in template_of} == {k: original[k] for k in template_of}


def test_kserves_webhooks_are_served(kserve_stack: KServeStack) -> None:
    """The apiserver calls KServe's own webhooks on the manager: conversion for both served
    versions, defaulting (spec.model.name) and validation (a worker without data or pipeline
    parallelism, which the schema admits)."""
    api = kserve_stack.api
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "llminferenceservices.serving.kserve.io"
    )
    assert crd.spec.conversion.strategy == "Webhook"
    assert crd.spec.conversion.webhook.client_config.url.endswith("/convert")
    ns = new_namespace(api, "kserve-hooks")
    create_target(api, ns, llm_inference_service("plain", tp=8, model_uri=NEMOTRON))
    assert stored(api, ns, "plain")["spec"]["model"]["name"] == "plain"
    v1alpha1 = _get(api, f"/apis/serving.kserve.io/v1alpha1/namespaces/{ns}/llminferenceservices")
    assert [o["apiVersion"] for o in v1alpha1["items"]] == ["serving.kserve.io/v1alpha1"]

    bad = llm_inference_service("bad", tp=8, model_uri=NEMOTRON)
    bad["spec"]["worker"] = copy.deepcopy(bad["spec"]["template"])
    with pytest.raises(client.ApiException) as refused:
        create_target(api, ns, bad)
    status = json.loads(str(refused.value.body))
    hook = "llminferenceservice.kserve-webhook-server.v1alpha2.validator"
    assert status["message"].startswith(f'admission webhook "{hook}" denied'), status
    [cause] = status["details"]["causes"]
    assert cause["field"] == "spec.worker" and "parallelism must be configured" in cause["message"]


def test_no_write_war_with_kserves_controller(kserve_stack: KServeStack) -> None:
    """A router-less object (the oracle harness cannot render one: KServe's reconciler asks
    the API server's discovery for the v1alpha2 InferencePool, and the harness has no server)
    with a CPU tier: KServe's Deployment gets the flag, and once both controllers settled,
    kvtier writes nothing more while KServe goes on reconciling its status."""
    api, name = kserve_stack.api, "plain"
    ns = new_namespace(api, "kserve-quiet")
    create_target(api, ns, llm_inference_service(name, tp=8, model_uri=NEMOTRON))
    create_tier(api, ns, name, _tier(name))
    tier = wait_condition(api, ns, name, "Ready", "True", "Applied", timeout=120)
    key = ("Deployment", f"{name}-kserve", "pod")

    def flag(w: dict[tuple[str, str, str], Any]) -> Any:
        return key in w and kv_transfer_config(vllm_argv(container(w[key])))

    real = settled(api, ns, name, flag, "the Deployment with kvtier's flag")
    extra = kv_transfer_config(vllm_argv(container(real[key])))[EXTRA]
    assert extra["cpu_bytes_to_use"] == tier["status"]["sizing"]["cpuBytesToUse"]

    generation = stored(api, ns, name)["metadata"]["generation"]
    time.sleep(3)
    start = time.time()
    time.sleep(20)  # KServe reconciles its status meanwhile
    kserve_stack.operator.wait_resyncs()  # and kvtier looks at every tier twice
    names: list[str] = []
    writes = audit.writes(kserve_stack.cluster.audit_log, since=start, names=names, namespace=ns)
    assert sum(n for (_, res), n in writes.items() if res == "llminferenceservices") == 0, names
    assert stored(api, ns, name)["metadata"]["generation"] == generation
