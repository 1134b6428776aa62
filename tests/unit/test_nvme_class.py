"""StorageClass NVMe pools: the policy's rules, the per-pod claim, and what decide writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from kvtier.api.policy import (
    CLASS_VOLUME_SOURCE_MESSAGE,
    HOST_PATH_MESSAGE,
    POOL_SOURCE_MESSAGE,
    KVCachePolicySpec,
)
from kvtier.controller.controller import Controller
from kvtier.controller.watches import on_capacity, on_policy, on_storage_class
from kvtier.kube.rest import Kube
from kvtier.names.labels import TierRef
from kvtier.policy.contract import Decision
from kvtier.policy.decide import decide
from kvtier.policy.provisioning import policy_writes
from kvtier.settings import nvme_pools
from kvtier.tiers.nvme import binding_warning, class_claim_spec, class_pool_note, nvme_claim_spec
from tests.unit.test_decide import NODES, facts, llmisvc, tier

CLASS = "lvms-vg1"
POOL = {
    "name": "lvms-nvme",
    "storageClassName": CLASS,
    "nodeSelector": {"kvcache.io/local-nvme": "true"},
    "capacityPerNode": "3Ti",
}
POLICY = {"metadata": {"name": "cluster"}, "spec": {"nvmePools": [POOL]}}
STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": CLASS},
    "provisioner": "topolvm.io",
    "volumeBindingMode": "WaitForFirstConsumer",
}


def capacity(node: str, size: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"csisc-{node}", "namespace": "openshift-lvm-storage"},
        "storageClassName": CLASS,
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
        "capacity": size,
    }


def hostnamed(n: dict[str, Any]) -> dict[str, Any]:
    name = n["metadata"]["name"]
    meta = {**n["metadata"], "labels": {**n["metadata"]["labels"], "kubernetes.io/hostname": name}}
    return {**n, "metadata": meta}


HOST_NODES = [hostnamed(n) for n in NODES]


# --- the policy ---------------------------------------------------------------------------


def test_a_pool_is_a_storage_class_or_a_mount_path() -> None:
    spec = KVCachePolicySpec.model_validate({"nvmePools": [POOL]})
    (pool,) = nvme_pools(spec)
    assert (pool.storage_class_name, pool.mount_path) == (CLASS, None)
    for pools in (
        [{**POOL, "mountPath": "/var/mnt/nvme"}],
        [{"name": "p", "capacityPerNode": "1Ti"}],
    ):
        with pytest.raises(ValidationError, match=r"set exactly one of mountPath"):
            KVCachePolicySpec.model_validate({"nvmePools": pools})
    with pytest.raises(ValidationError) as err:
        KVCachePolicySpec.model_validate({"nvmePools": [{**POOL, "volumeSource": "Local"}]})
    assert CLASS_VOLUME_SOURCE_MESSAGE in str(err.value)
    assert "exactly one" in POOL_SOURCE_MESSAGE


def test_host_path_pools_are_refused_with_the_reason() -> None:
    pool = {"name": "p", "mountPath": "/var/mnt/nvme", "capacityPerNode": "1Ti"}
    with pytest.raises(ValidationError) as err:
        KVCachePolicySpec.model_validate({"nvmePools": [{**pool, "volumeSource": "HostPath"}]})
    assert HOST_PATH_MESSAGE in str(err.value)
    assert "restricted-v2" in HOST_PATH_MESSAGE and "docs/nvme.md" in HOST_PATH_MESSAGE
    KVCachePolicySpec.model_validate({"nvmePools": [{**pool, "volumeSource": "Local"}]})


def test_kvtier_makes_no_storage_class_for_a_class_pool() -> None:
    local = {"name": "local", "mountPath": "/var/mnt/nvme", "capacityPerNode": "1Ti"}
    writes = policy_writes({"metadata": {"name": "cluster"}, "spec": {"nvmePools": [POOL, local]}})
    assert [(w.kind, w.name) for w in writes] == [("StorageClass", "kvtier-nvme-local")]


# --- the claim ----------------------------------------------------------------------------


def test_the_claim_names_the_class_and_selects_no_volume() -> None:
    assert class_claim_spec(CLASS, 2 << 40) == {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "storageClassName": CLASS,
        "resources": {"requests": {"storage": "2Ti"}},
    }
    (pool,) = nvme_pools(KVCachePolicySpec.model_validate({"nvmePools": [POOL]}))
    assert nvme_claim_spec(TierRef("llm", "t"), pool, 1 << 40) == class_claim_spec(CLASS, 1 << 40)
    assert "kvtier makes no PersistentVolume" in class_pool_note("lvms-nvme", CLASS)


def test_only_a_class_that_binds_before_the_pod_is_warned_about() -> None:
    assert binding_warning(STORAGE_CLASS) is None
    immediate = {**STORAGE_CLASS, "volumeBindingMode": "Immediate"}
    unset = {k: v for k, v in STORAGE_CLASS.items() if k != "volumeBindingMode"}
    for cls in (immediate, unset):
        warning = binding_warning(cls)
        assert warning is not None and "volumeBindingMode Immediate" in warning


# --- decide ---------------------------------------------------------------------------------


def class_tier(probe: bool = False) -> dict[str, Any]:
    t = tier(
        mode="Apply",
        disk={"type": "NVMe", "nvme": {"pool": "lvms-nvme", "size": "2Ti"}},
        probe={"enabled": probe},
    )
    t["metadata"]["uid"] = "uid-1"
    return t


def apply_decision(probe: bool = False, **kw: Any) -> Decision:
    base: dict[str, Any] = {
        "policy": POLICY,
        "nodes": HOST_NODES,
        "target": llmisvc(replicas=2),
        "storage_classes": {CLASS: STORAGE_CLASS},
    }
    return decide(facts(class_tier(probe), **{**base, **kw}))


def conditions(d: Decision) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in d.status["conditions"]}


def target_claim(d: Decision) -> dict[str, Any]:
    apply = next(w for w in d.writes if w.kind == "LLMInferenceService" and w.action == "Apply")
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "volumeClaimTemplate" in value:
                found.append(value["volumeClaimTemplate"]["spec"])
            if "pvc" in value and "spec" in value["pvc"]:  # LLMInferenceService's own field
                found.append(value["pvc"]["spec"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(apply.body)
    assert found, "the target mounts no per-pod claim"
    return found[0]


def test_enough_capacity_applies_claims_of_the_class_and_no_volumes() -> None:
    d = apply_decision(capacities=[capacity("gpu-node-0", "2Ti"), capacity("gpu-node-1", "5Ti")])
    c = conditions(d)["Provisioned"]
    assert (c["status"], c["reason"]) == ("True", "CapacityAvailable")
    assert {w.kind for w in d.writes} == {"LLMInferenceService"}  # no PV, no StorageClass
    assert target_claim(d) == class_claim_spec(CLASS, 2 << 40)
    assert "ephemeral claim of StorageClass lvms-vg1" in d.status["plan"]["summary"]
    nvme = next(t for t in d.status["tiers"] if t["name"] == "nvme")
    assert nvme["capacityBytes"] == 2 << 40 and nvme["ready"] is False  # not applied yet


def test_too_little_capacity_holds_the_target_back() -> None:
    d = apply_decision(capacities=[capacity("gpu-node-0", "3Ti")])
    c = conditions(d)
    assert (c["Provisioned"]["status"], c["Provisioned"]["reason"]) == (
        "False",
        "InsufficientStorageCapacity",
    )
    assert "2 replica(s) need" in c["Provisioned"]["message"]
    assert "holds 1 on the 4 node(s)" in c["Provisioned"]["message"]
    assert c["Ready"]["reason"] == "InsufficientStorageCapacity"
    assert d.writes == []


def test_a_missing_class_or_no_published_capacity() -> None:
    missing = apply_decision(storage_classes={})
    assert conditions(missing)["Provisioned"]["reason"] == "StorageClassNotFound"
    assert missing.writes == []
    unchecked = apply_decision()
    c = conditions(unchecked)["Provisioned"]
    assert (c["status"], c["reason"]) == ("True", "CapacityNotPublished")
    assert target_claim(unchecked)["storageClassName"] == CLASS


def test_an_immediate_class_is_warned_about_in_the_plan() -> None:
    d = apply_decision(storage_classes={CLASS: {**STORAGE_CLASS, "volumeBindingMode": "Immediate"}})
    assert (
        "warning: StorageClass lvms-vg1 has volumeBindingMode Immediate"
        in (d.status["plan"]["summary"])
    )


def test_the_probe_of_a_class_pool_claims_the_class_too() -> None:
    d = apply_decision(probe=True)
    assert d.probe is not None and d.probe.create is not None
    volume = d.probe.create["spec"]["template"]["spec"]["volumes"][0]
    assert volume["ephemeral"]["volumeClaimTemplate"]["spec"] == class_claim_spec(CLASS, 2 << 40)


# --- watches ------------------------------------------------------------------------------


def test_class_and_capacity_changes_wake_the_tiers_of_a_class_pool_only() -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        controller = Controller(Kube(client.ApiClient()))
        controller.cache.set_tier(("llm", "t"), tier())
        on_policy(controller, "ADDED", POLICY)
        while len(controller.queue):
            controller.queue.done(await controller.queue.get())
        on_capacity(controller, "ADDED", {**capacity("n", "1Ti"), "storageClassName": "other"})
        on_storage_class(controller, "ADDED", {"metadata": {"name": "other"}})
        quiet = len(controller.queue)
        on_capacity(controller, "ADDED", capacity("gpu-node-0", "1Ti"))
        woken = [await controller.queue.get()]
        on_storage_class(controller, "DELETED", STORAGE_CLASS)
        return [quiet, sorted(controller.cache.capacities)], [
            woken,
            sorted(controller.cache.storage_classes),
        ]

    (quiet, kept), (woken, classes) = asyncio.run(run())
    assert quiet == 0 and woken == [("llm", "t")]
    assert kept == [
        ("openshift-lvm-storage", "csisc-gpu-node-0"),
        ("openshift-lvm-storage", "csisc-n"),
    ]
    assert classes == ["other"]


def test_a_stored_host_path_policy_is_invalid_and_writes_nothing() -> None:
    # Admitted before HostPath was removed: the operator names the field and the reason.
    old = {"name": "lvms-nvme", "mountPath": "/var/mnt/nvme", "capacityPerNode": "3Ti"}
    stored = {
        "metadata": {"name": "cluster"},
        "spec": {"nvmePools": [{**old, "volumeSource": "HostPath"}]},
    }
    d = apply_decision(policy=stored)
    c = conditions(d)["PolicyCompliant"]
    assert (c["status"], c["reason"]) == ("False", "PolicyInvalid")
    assert "spec.nvmePools[].volumeSource: HostPath is no longer supported" in c["message"]
    assert d.writes == []
