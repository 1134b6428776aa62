"""The storage probe end to end: the operator starts a fio Job on a provisioned tier, the test
plays the kubelet by finishing the kwok pod with the termination message of a REAL
`kvtier probe` run, and status, conditions, metrics and the gating decision follow."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import create_target, inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    events_for,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess

LLAMA = "hf://meta-llama/Llama-3.1-70B-Instruct"
BLOCK = 5242880  # Llama-3.1-70B: 16 tokens x 327,680 B
CONTEXT = 50000
POLICY: dict[str, Any] = {"cephfs": {"storageClassName": "ocs-storagecluster-cephfs"}}


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "probe")


@pytest.fixture(scope="module")
def real_probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real `kvtier probe` run (fio, the study's pattern, short) on a disk directory."""
    work = tmp_path_factory.mktemp("fio")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvtier",
            "probe",
            "--dir",
            str(work),
            "--block-bytes",
            str(BLOCK),
            "--runtime",
            "1",
            "--numjobs",
            "2",
            "--size",
            str(4 * BLOCK),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    assert len(out.stdout.encode()) < 4096  # fits a termination message
    return result


def cephfs_tier(admin_api: client.ApiClient, ns: str, name: str, ttft: float) -> None:
    create_target(admin_api, ns, inference_service(name, tp=4, model_uri=LLAMA, min_replicas=2))
    create_tier(
        admin_api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"kind": "InferenceService", "name": name},
            "workload": {"averageContextTokens": CONTEXT, "concurrentSessions": 96},
            "cpu": {"size": "200Gi"},
            "disk": {"type": "CephFS", "cephfs": {"size": "1Ti"}},
            "probe": {"enabled": True, "baselineTTFTSeconds": ttft, "runtimeSeconds": 5},
        },
    )
    claim = eventually(
        lambda: next(
            (
                t.get("claimName")
                for t in (get_tier(admin_api, ns, name).get("status") or {}).get("tiers") or []
                if t["name"] == "cephfs"
            ),
            None,
        ),
        what="the CephFS claim",
    )
    # Play the CephFS provisioner.
    client.CoreV1Api(admin_api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"{ns}-{name}"),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Ti"},
                access_modes=["ReadWriteMany"],
                storage_class_name="ocs-storagecluster-cephfs",
                claim_ref=client.V1ObjectReference(namespace=ns, name=claim),
                csi=client.V1CSIPersistentVolumeSource(
                    driver="openshift-storage.cephfs.csi.ceph.com", volume_handle=f"{ns}-{name}"
                ),
            ),
        )
    )


def probe_job(admin_api: client.ApiClient, ns: str, name: str, attempt: int = 0) -> Any:
    batch = client.BatchV1Api(admin_api)

    def find() -> Any:
        jobs = batch.list_namespaced_job(ns).items
        return next(
            (
                j
                for j in jobs
                if j.metadata.name.endswith(f"-{attempt}")
                and j.metadata.owner_references[0].name == name
            ),
            None,
        )

    return eventually(find, timeout=60, what=f"probe Job attempt {attempt} of {name}")


def finish_pod(
    admin_api: client.ApiClient, ns: str, job: Any, exit_code: int, message: str
) -> None:
    """Play the kubelet: the probe container terminates with this message."""
    core = client.CoreV1Api(admin_api)
    pod = eventually(
        lambda: next(
            iter(
                core.list_namespaced_pod(ns, label_selector=f"job-name={job.metadata.name}").items
            ),
            None,
        ),
        what="the probe pod",
    )
    now = "2026-11-30T12:00:00Z"
    state = {
        "terminated": {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "message": message,
            "startedAt": now,
            "finishedAt": now,
        }
    }
    core.patch_namespaced_pod_status(
        pod.metadata.name,
        ns,
        {
            "status": {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": "probe",
                        "image": "kvtier",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": state,
                    }
                ],
            }
        },
    )


def test_probe_job_measures_and_gates(
    admin_api: client.ApiClient, ns: str, real_probe: dict[str, Any], operator: OperatorProcess
) -> None:
    cephfs_tier(admin_api, ns, "fast", ttft=60)
    job = probe_job(admin_api, ns, "fast")
    spec = job.spec.template.spec
    container = spec.containers[0]
    assert container.command[:2] == ["kvtier", "probe"]
    assert container.command[container.command.index("--block-bytes") + 1] == str(BLOCK)
    assert container.command[container.command.index("--dir") + 1] == "/mnt/kv-cache"
    claims = [
        v.persistent_volume_claim.claim_name for v in spec.volumes if v.persistent_volume_claim
    ]
    tier = get_tier(admin_api, ns, "fast")
    assert claims == [
        next(t["claimName"] for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    ]
    sc = container.security_context
    assert sc.allow_privilege_escalation is False and sc.capabilities.drop == ["ALL"]
    assert sc.read_only_root_filesystem is True and spec.security_context.run_as_non_root is True
    assert spec.security_context.run_as_user is None  # OpenShift assigns the UID
    assert job.metadata.owner_references[0].kind == "KVCacheTier"
    assert wait_condition(admin_api, ns, "fast", "Probed", "False", "Probing")
    # The namespace enforces Pod Security `restricted` and the Job's pod is admitted there (a
    # refused one leaves the Job with a FailedCreate event and no pod).
    core = client.CoreV1Api(admin_api)
    labels = core.read_namespace(ns).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    eventually(
        lambda: core.list_namespaced_pod(ns, label_selector=f"job-name={job.metadata.name}").items,
        what="the probe pod, admitted under restricted",
    )

    finish_pod(admin_api, ns, job, 0, json.dumps(real_probe, separators=(",", ":")))
    wait_condition(admin_api, ns, "fast", "Probed", "True", "Measured", timeout=60)
    # The reconcile that collects the probe records it; sizing takes it in on the next one
    # (the Job's removal wakes it), so the crossover appears a reconcile later.
    tier = eventually(
        lambda: (
            (t := get_tier(admin_api, ns, "fast"))
            and any("crossoverTokens" in x for x in t["status"]["tiers"] if x["name"] == "cephfs")
            and t
        ),
        timeout=60,
        what="the crossover from the probe",
    )
    cephfs = next(t for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    probe = cephfs["probe"]
    assert probe["p99Seconds"] == real_probe["p99Seconds"]
    assert probe["p50Seconds"] == real_probe["p50Seconds"]
    assert probe["bandwidthBytesPerSecond"] == real_probe["bandwidthBytesPerSecond"]
    assert probe["buffered"] is False
    # The study's crossover, by hand: L = T_p99 / (TTFT / context).
    expected = math.ceil(real_probe["p99Seconds"] / (60 / CONTEXT))
    assert abs(cephfs["crossoverTokens"] - expected) <= 1
    beneficial = {c["type"]: c for c in tier["status"]["conditions"]}["TierBeneficial"]
    restore = CONTEXT / 16 * BLOCK / real_probe["bandwidthBytesPerSecond"]
    assert beneficial["status"] == ("True" if expected < CONTEXT and restore < 60 else "False")
    assert cephfs["beneficial"] is (beneficial["status"] == "True")
    eventually(
        lambda: (
            job.metadata.name
            not in {
                j.metadata.name for j in client.BatchV1Api(admin_api).list_namespaced_job(ns).items
            }
        ),
        what="the Job cleaned up",
    )
    text = operator.metrics()
    assert f'kvtier_probe_p99_seconds{{name="fast",namespace="{ns}",tier="cephfs"}}' in text
    assert "kvtier_probe_runs_total" in text


def test_slow_tier_is_flagged_with_its_numbers(
    admin_api: client.ApiClient, ns: str, real_probe: dict[str, Any]
) -> None:
    # Prefill this fast makes any restore lose: the crossover lies far above the context.
    cephfs_tier(admin_api, ns, "slow", ttft=0.0001)
    job = probe_job(admin_api, ns, "slow")
    finish_pod(admin_api, ns, job, 0, json.dumps(real_probe))
    tier = wait_condition(admin_api, ns, "slow", "TierBeneficial", "False", timeout=60)
    message = {c["type"]: c for c in tier["status"]["conditions"]}["TierBeneficial"]["message"]
    assert str(real_probe["p99Seconds"]) in message or "p99" in message
    assert {c["type"]: c for c in tier["status"]["conditions"]}["Ready"]["status"] == "True"
    eventually(
        lambda: any(
            e.type == "Warning" and e.reason == tier_reason(tier)
            for e in events_for(admin_api, ns, "slow")
        ),
        what="a Warning event for the slow tier",
    )


def tier_reason(tier: dict[str, Any]) -> str:
    return str({c["type"]: c for c in tier["status"]["conditions"]}["TierBeneficial"]["reason"])


def test_failed_probe_is_reported_and_retried(admin_api: client.ApiClient, ns: str) -> None:
    cephfs_tier(admin_api, ns, "flaky", ttft=60)
    job = probe_job(admin_api, ns, "flaky")
    finish_pod(admin_api, ns, job, 3, json.dumps({"error": "fio: O_DIRECT refused", "exitCode": 3}))
    tier = wait_condition(admin_api, ns, "flaky", "Probed", "False", "ProbeFailed", timeout=60)
    cephfs = next(t for t in tier["status"]["tiers"] if t["name"] == "cephfs")
    assert cephfs["probe"]["failures"] == 1
    assert "O_DIRECT" in cephfs["probe"]["lastFailure"]
    # Backoff, then a fresh attempt under a new name.
    retry = probe_job(admin_api, ns, "flaky", attempt=1)
    assert retry.metadata.name != job.metadata.name


def test_reprobe_on_annotation(admin_api: client.ApiClient, ns: str) -> None:
    before = {j.metadata.name for j in client.BatchV1Api(admin_api).list_namespaced_job(ns).items}
    client.CustomObjectsApi(admin_api).patch_namespaced_custom_object(
        "kvcache.io",
        "v1alpha1",
        ns,
        "kvcachetiers",
        "fast",
        {"metadata": {"annotations": {"kvcache.io/reprobe": "after-maintenance"}}},
    )
    wait_condition(admin_api, ns, "fast", "Probed", "False", "Probing", timeout=60)
    jobs = eventually(
        lambda: [
            j
            for j in client.BatchV1Api(admin_api).list_namespaced_job(ns).items
            if j.metadata.name not in before and j.metadata.owner_references[0].name == "fast"
        ],
        what="a new probe Job",
    )
    assert len(jobs) == 1  # never two probes of one tier at once
