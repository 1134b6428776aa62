"""The probe Job (batch/v1) and the reading of its termination message."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kvtier.names.labels import PROBE_TIER, TierRef
from kvtier.render.probe_job import (
    MOUNT_PATH,
    ProbeMessageError,
    parse_termination_message,
    probe_job,
    probe_job_name,
)
from kvtier.tiers.base import PerPodClaim, ProbeVolume, SharedClaim

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fio"
TIER = TierRef(namespace="llm", name="nemotron", uid="0b9e6c1e-5f0e-4a59-9c55-2f1f3a8d7c11")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CLAIM_SPEC = {
    "accessModes": ["ReadWriteOnce"],
    "storageClassName": "kvtier-nvme-local-nvme",
    "resources": {"requests": {"storage": "2Ti"}},
    "selector": {"matchLabels": {"kvcache.io/tier-id": TIER.id}},
}
NVME = ProbeVolume("NVMe", PerPodClaim(CLAIM_SPEC), {"node-role/gpu": "true"})
CEPHFS = ProbeVolume("CephFS", SharedClaim("kvtier-nemotron-cephfs"))


def _job(volume: ProbeVolume = NVME, **kwargs: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "image": "quay.io/example/kvtier:0.1.0",
        "block_bytes": 4_194_304,
        "runtime_seconds": 60,
        "generation": 3,
        **kwargs,
    }
    return probe_job(TIER, volume, **settings)


def _container(job: dict[str, Any]) -> dict[str, Any]:
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def test_job_runs_kvtier_probe_with_the_block_size() -> None:
    job = _job()
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    container = _container(job)
    assert container["image"] == "quay.io/example/kvtier:0.1.0"
    command = container["command"]
    assert command[:2] == ["kvtier", "probe"]
    pairs = dict(zip(command[2::2], command[3::2], strict=False))
    assert pairs["--dir"] == MOUNT_PATH == "/mnt/kv-cache"
    assert pairs["--block-bytes"] == "4194304"
    assert pairs["--runtime"] == "60"
    assert pairs["--output"] == "json"
    assert "--allow-buffered" not in command
    extra = _container(_job(numjobs=4, allow_buffered=True))["command"]
    assert "--allow-buffered" in extra and extra[extra.index("--numjobs") + 1] == "4"


def test_job_lifecycle_and_termination_message() -> None:
    spec = _job(runtime_seconds=90, deadline_margin_seconds=300, ttl_seconds_after_finished=60)[
        "spec"
    ]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 390
    assert spec["ttlSecondsAfterFinished"] == 60
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    container = _container(_job())
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}


def test_restricted_v2_security_context() -> None:
    job = _job()
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    sc = _container(job)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    text = json.dumps(job)
    for forbidden in ("runAsUser", "hostPath", "privileged", "hostNetwork"):
        assert forbidden not in text
    # A read-only root still has a writable /tmp.
    mounts = {m["mountPath"]: m["name"] for m in _container(job)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_nvme_volume_is_the_tiers_per_pod_claim_on_a_pool_node() -> None:
    job = _job(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    pod = job["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in _container(job)["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[MOUNT_PATH])
    template = volume["ephemeral"]["volumeClaimTemplate"]
    assert template["spec"] == CLAIM_SPEC
    assert template["metadata"]["labels"][PROBE_TIER] == TIER.id
    assert pod["nodeSelector"] == {"node-role/gpu": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def test_cephfs_volume_is_the_shared_claim() -> None:
    pod = _job(CEPHFS)["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [{"claimName": "kvtier-nemotron-cephfs"}]
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_labels_and_owner() -> None:
    job = _job()
    meta = job["metadata"]
    assert meta["namespace"] == "llm"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "kvtier"
    assert meta["labels"][PROBE_TIER] == TIER.id
    assert job["spec"]["template"]["metadata"]["labels"] == meta["labels"]
    (owner,) = meta["ownerReferences"]
    assert owner["apiVersion"] == "kvcache.io/v1alpha1" and owner["kind"] == "KVCacheTier"
    assert owner["name"] == "nemotron" and owner["uid"] == TIER.uid
    assert owner["controller"] is True
    with pytest.raises(ValueError, match="uid"):
        probe_job(
            TierRef("llm", "nemotron"),
            NVME,
            image="i",
            block_bytes=1,
            runtime_seconds=1,
            generation=1,
        )


def test_names_are_deterministic_dns_labels() -> None:
    name = _job()["metadata"]["name"]
    assert name == _job()["metadata"]["name"] == probe_job_name(TIER, "NVMe", 3, 0)
    assert name.startswith("kvtier-probe-") and name.endswith("-3-0")
    assert len(name) <= 63 and DNS_LABEL.match(name)
    others = {
        _job(attempt=1)["metadata"]["name"],
        _job(generation=4)["metadata"]["name"],
        _job(CEPHFS)["metadata"]["name"],
        probe_job_name(TierRef("other", "nemotron", "u"), "NVMe", 3, 0),
        probe_job_name(TierRef("llm", "x" * 253, "u"), "NVMe", 2**62, 999),
    }
    assert name not in others and len(others) == 5
    assert all(len(n) <= 63 and DNS_LABEL.match(n) for n in others)


# --- termination messages -------------------------------------------------------------------


def test_real_probe_result_parses_to_the_status_block() -> None:
    text = (FIXTURES / "kvtier-probe-real.json").read_text()
    document = json.loads(text)
    status = parse_termination_message(text + "\n")
    assert status == {
        "p50Seconds": document["p50Seconds"],
        "p99Seconds": document["p99Seconds"],
        "bandwidthBytesPerSecond": document["bandwidthBytesPerSecond"],
        "measuredAt": document["measuredAt"],
        "buffered": False,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no termination message"),
        ('{"error": "probe: /mnt/kv-cache is not writable", "exitCode": 3}', "not writable"),
        (
            "Traceback (most recent call last):\n  ...\nkvtier: error: probe: fio failed",
            r"^probe failed: kvtier: error: probe: fio failed$",
        ),
        ("[1]", "not a JSON object"),
        ('{"p99Seconds": 0.01}', "lacks bandwidthBytesPerSecond, measuredAt"),
        (
            '{"p99Seconds": -1, "bandwidthBytesPerSecond": 1, '
            '"measuredAt": "2026-01-01T00:00:00Z"}',
            "p99Seconds",
        ),
        (
            '{"p99Seconds": 0.1, "bandwidthBytesPerSecond": 1, "measuredAt": "yesterday"}',
            "measuredAt",
        ),
    ],
)
def test_bad_termination_messages(text: str, message: str) -> None:
    with pytest.raises(ProbeMessageError, match=message) as info:
        parse_termination_message(text)
    assert "\n" not in str(info.value)
