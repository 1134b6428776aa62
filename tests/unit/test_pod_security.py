"""The restricted Pod Security Standard, checked on what kvtier renders: the probe Job's pod,
and an LLMInferenceService's pod after kvtier's apply body (memory, the /dev/shm memory
emptyDir, the disk tier's claim or claim template, mounts, env) for every version and disk.
An InferenceService's pod is KServe's to build, so its case runs KServe's own code
(tests/e2e/test_runtime_pod_oracle.py). The e2e twin, tests/e2e/test_pod_security.py, lets
kube-apiserver's PodSecurity admission judge."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.names.labels import TierRef
from kvtier.names.objects import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.render.probe_job import probe_job
from kvtier.render.result import DesiredWrite
from kvtier.sizing import ConnectorSettings
from kvtier.targets.base import Conflict
from kvtier.targets.offload import Offload, plan_offload
from kvtier.targets.registry import target_patch
from kvtier.tiers.base import PerPodClaim, ProbeVolume, SharedClaim
from tests.pod_security import (
    apply_writes,
    pod_from_target,
    restricted_target,
    restricted_violations,
)

REPO = Path(__file__).resolve().parents[2]
TARGETS = REPO / "examples" / "targets"
GiB = 1 << 30
TIER = TierRef(namespace="llm", name="nemotron", uid="0b9e6c1e-5f0e-4a59-9c55-2f1f3a8d7c11")
NVME_SPEC = {
    "accessModes": ["ReadWriteOnce"],
    "storageClassName": "kvtier-nvme-local-nvme",
    "resources": {"requests": {"storage": "1Ti"}},
    "selector": {"matchLabels": {"kvcache.io/tier-id": TIER.id}},
}
DISKS: dict[str, SharedClaim | PerPodClaim | None] = {
    "None": None,
    "NVMe": PerPodClaim(spec=NVME_SPEC),
    "CephFS": SharedClaim("kvtier-gpt-oss-cephfs"),
}
EXAMPLES = {
    "LLMInferenceService/v1alpha1": "gptoss-llmisvc-v1alpha1.yaml",
    "LLMInferenceService/v1alpha2": "nemotron-llmisvc.yaml",
}
# Keys that, anywhere in what kvtier writes to a model server, would loosen the pod.
LOOSENING = {
    "securityContext",
    "privileged",
    "hostPath",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostPort",
    "capabilities",
    "allowPrivilegeEscalation",
    "runAsUser",
}


def _compliant() -> dict[str, Any]:
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "main",
                "image": "x",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
    }


def _container_sc(spec: dict[str, Any]) -> dict[str, Any]:
    sc: dict[str, Any] = spec["containers"][0]["securityContext"]
    return sc


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "hostPath": (
        lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/var"}}),
        "hostPath",
    ),
    "privileged": (lambda s: _container_sc(s).update(privileged=True), "privileged"),
    "escalation": (
        lambda s: _container_sc(s).update(allowPrivilegeEscalation=True),
        "allowPrivilegeEscalation",
    ),
    "no-escalation-field": (
        lambda s: _container_sc(s).pop("allowPrivilegeEscalation"),
        "allowPrivilegeEscalation",
    ),
    "caps-kept": (lambda s: _container_sc(s).pop("capabilities"), "drop ALL"),
    "cap-added": (
        lambda s: _container_sc(s)["capabilities"].update(add=["SYS_ADMIN"]),
        "SYS_ADMIN",
    ),
    "root-allowed": (lambda s: s["securityContext"].pop("runAsNonRoot"), "runAsNonRoot"),
    "container-root": (lambda s: _container_sc(s).update(runAsNonRoot=False), "runAsNonRoot"),
    "uid-0": (lambda s: _container_sc(s).update(runAsUser=0), "runAsUser 0"),
    "no-seccomp": (lambda s: s["securityContext"].pop("seccompProfile"), "seccompProfile"),
    "unconfined": (
        lambda s: _container_sc(s).update(seccompProfile={"type": "Unconfined"}),
        "Unconfined",
    ),
    "hostNetwork": (lambda s: s.update(hostNetwork=True), "hostNetwork"),
    "hostPort": (
        lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
        "hostPort",
    ),
    "init-container": (
        lambda s: s.update(initContainers=[{"name": "init", "image": "x"}]),
        "container init",
    ),
    "sysctl": (
        lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
        "kernel.msgmax",
    ),
    "procMount": (lambda s: _container_sc(s).update(procMount="Unmasked"), "procMount"),
    "selinux-user": (
        lambda s: s["securityContext"].update(seLinuxOptions={"user": "system_u"}),
        "seLinuxOptions.user",
    ),
}


def test_the_check_passes_a_restricted_pod() -> None:
    assert restricted_violations(_compliant()) == []


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_check_refuses_each_breach(mutation: str) -> None:
    """The check is no rubber stamp: each single breach of the standard is named."""
    spec = _compliant()
    change, words = MUTATIONS[mutation]
    change(spec)
    violations = restricted_violations(spec)
    assert any(words in v for v in violations), violations


@pytest.mark.parametrize("disk", ["NVMe", "CephFS"])
def test_probe_job_pod_passes_restricted(disk: str) -> None:
    volume: ProbeVolume = (
        ProbeVolume("NVMe", PerPodClaim(NVME_SPEC), {"kubernetes.io/hostname": "n0"})
        if disk == "NVMe"
        else ProbeVolume("CephFS", SharedClaim("kvtier-nemotron-cephfs"))
    )
    job = probe_job(
        TIER,
        volume,
        image="quay.io/example/kvtier:0.1.0",
        block_bytes=4_194_304,
        runtime_seconds=60,
        generation=3,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    template = job["spec"]["template"]
    assert restricted_violations(template["spec"], template["metadata"].get("annotations")) == []
    # The settings the standard needs, each set by kvtier itself (not left to defaults).
    sc = template["spec"]["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    kinds = {k for v in template["spec"]["volumes"] for k in v if k != "name"}
    assert kinds == {"emptyDir", "ephemeral" if disk == "NVMe" else "persistentVolumeClaim"}


def _user(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((TARGETS / EXAMPLES[kind]).read_text())
    return restricted_target(loaded)


def _offload(disk: str) -> Offload:
    claim = DISKS[disk]
    return Offload(
        plan=plan_offload(
            ConnectorSettings(16, disk if claim else None), 256 * GiB, 516 * GiB, 260 * GiB
        ),
        disk=claim,
        disk_label=disk if claim else None,
        python_hash_seed="0" if isinstance(claim, SharedClaim) else None,
    )


def _writes(target: dict[str, Any], offload: Offload) -> list[DesiredWrite]:
    result = target_patch(target, offload)
    assert not isinstance(result, Conflict), result
    writes = result if isinstance(result, list) else [result]
    assert writes and all(isinstance(w, DesiredWrite) for w in writes)
    return writes


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


@pytest.mark.parametrize("disk", sorted(DISKS))
@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_model_server_pod_with_kvtiers_additions_passes_restricted(kind: str, disk: str) -> None:
    user = _user(kind)
    assert restricted_violations(pod_from_target(user, "x")["spec"]) == []
    writes = _writes(user, _offload(disk))
    written = {k for w in writes for k in _keys(w.body)}
    assert not written & LOOSENING, written & LOOSENING
    pod = pod_from_target(apply_writes(user, writes), "x")["spec"]
    assert restricted_violations(pod) == []
    # kvtier's additions are really in the pod that passed.
    names = {v["name"] for v in pod["volumes"]}
    assert DSHM_VOLUME in names
    kinds = {k for v in pod["volumes"] for k in v if k != "name"}
    if disk == "NVMe":
        assert "ephemeral" in kinds
    elif disk == "CephFS":
        assert "persistentVolumeClaim" in kinds
    if disk != "None" and kind != "LLMInferenceService/v1alpha2":
        assert KV_CACHE_VOLUME in names
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/dev/shm" in mounts


@pytest.mark.parametrize(
    "loosen",
    ["hostPath volume", "privileged container", "escalating container"],
)
def test_a_loosening_addition_would_be_caught(loosen: str) -> None:
    """Had kvtier's writes carried one of these, the pod check above would fail."""
    user = _user("LLMInferenceService/v1alpha1")
    writes = _writes(user, _offload("CephFS"))
    apply = next(w for w in writes if w.action == "Apply")
    body = copy.deepcopy(apply.body)
    template = body["spec"]["template"]
    if loosen == "hostPath volume":
        template["volumes"].append({"name": "kv-host", "hostPath": {"path": "/var/mnt"}})
    elif loosen == "privileged container":
        template["containers"][0]["securityContext"] = {"privileged": True}
    else:
        template["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    loosened = [w for w in writes if w is not apply] + [
        DesiredWrite("Apply", apply.api_version, apply.kind, apply.name, apply.namespace, body, "")
    ]
    assert restricted_violations(pod_from_target(apply_writes(user, writes), "x")["spec"]) == []
    assert restricted_violations(pod_from_target(apply_writes(user, loosened), "x")["spec"])


def _shipped_pod_specs() -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for doc in yaml.safe_load_all((REPO / "deploy" / "manifests" / "operator.yaml").read_text()):
        if doc and doc["kind"] == "Deployment":
            specs.append((f"deploy/manifests {doc['metadata']['name']}", doc["spec"]["template"]))
    for path in sorted((REPO / "bundle" / "manifests").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc and doc["kind"] == "ClusterServiceVersion":
            for d in doc["spec"]["install"]["spec"]["deployments"]:
                specs.append((f"bundle {d['name']}", d["spec"]["template"]))
    return specs


def test_shipped_operator_pods_pass_restricted() -> None:
    specs = _shipped_pod_specs()
    assert {what.split()[0] for what, _ in specs} == {"deploy/manifests", "bundle"}
    for what, template in specs:
        violations = restricted_violations(
            template["spec"], (template.get("metadata") or {}).get("annotations")
        )
        assert violations == [], (what, violations)


def test_shipped_operator_namespace_enforces_restricted() -> None:
    docs = yaml.safe_load_all((REPO / "deploy" / "manifests" / "rbac.yaml").read_text())
    namespace = next(d for d in docs if d and d["kind"] == "Namespace")
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
