"""`make demo`: kvtier end to end on a local control plane with 8 fake H100 nodes.

Installs the CRDs (kvtier's, and KServe's and Rook's own), the KVCachePolicy, three model
servers and their KVCacheTiers from examples/, runs the operator under its restricted
identity, plays the parts a real cluster would (a CephFS provisioner, and the kubelet that
finishes a probe pod with a real `kvtier probe` run of fio on this machine's disk), then
prints what kvtier decided; exits 1 naming each tier that did not become Ready.
KVTIER_DEMO_KEEP=1 leaves everything running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "localcluster"))
sys.path.insert(0, str(REPO))

from tests.e2e.kube_helpers import POD_SECURITY_LABELS  # noqa: E402
from tests.e2e.operator_process import OperatorProcess  # noqa: E402

from localcluster import LocalCluster, default_workdir  # noqa: E402

NAMESPACE = "llm"


def banner(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def get_json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json"))


def wait(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    print(f"(gave up waiting for {what})")
    return None


def install(cluster: LocalCluster) -> None:
    banner("Install CRDs, the KVCachePolicy, model servers and KVCacheTiers")
    cluster.install_crds(REPO / "deploy" / "crds")
    cluster.install_upstream_crds("full")
    cluster.kubectl("create", "namespace", NAMESPACE)
    # Pod Security `restricted`, as in the tests: the probe pods are admitted under it.
    labels = [f"{key}={value}" for key, value in POD_SECURITY_LABELS.items()]
    cluster.kubectl("label", "namespace", NAMESPACE, *labels)
    for path in [
        "kvcachepolicy.yaml",
        "targets",
        "kvcachetier.yaml",
        "kvcachetier-llama70b-nvme.yaml",
        "kvcachetier-gptoss-cephfs.yaml",
    ]:
        print(cluster.kubectl("apply", "-f", str(REPO / "examples" / path)), end="")


def play_cephfs_provisioner(cluster: LocalCluster) -> None:
    """No Ceph here: bind each pending kvtier CephFS claim to a matching PV."""
    claims = wait(
        "the CephFS claim",
        lambda: [
            c
            for c in get_json(cluster, "pvc", "-n", NAMESPACE)["items"]
            if c["spec"].get("accessModes") == ["ReadWriteMany"]
        ],
    )
    for claim in claims or []:
        meta, spec = claim["metadata"], claim["spec"]
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"demo-cephfs-{meta['name']}"},
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": spec["storageClassName"],
                "claimRef": {"namespace": NAMESPACE, "name": meta["name"]},
                "csi": {
                    "driver": "openshift-storage.cephfs.csi.ceph.com",
                    "volumeHandle": meta["name"],
                },
            },
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pv))
        print(f"played the CephFS provisioner for claim {meta['name']}")


def play_kubelet_for_probes(cluster: LocalCluster, scratch: Path, expected: int) -> None:
    """Finish each probe pod with the result of a real fio run on this machine."""

    def probe_pods() -> list[Any]:
        found: list[Any] = get_json(
            cluster, "pods", "-n", NAMESPACE, "-l", "kvcache.io/probe-tier"
        )["items"]
        return found

    # Finish the pods there are even when fewer come: the final wait names the tiers left.
    wait(f"{expected} probe pods", lambda: len(probe_pods()) >= expected, timeout=60)
    for pod in probe_pods():
        command = pod["spec"]["containers"][0]["command"]
        block = command[command.index("--block-bytes") + 1]
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtier",
                "probe",
                "--dir",
                str(scratch),
                "--block-bytes",
                block,
                "--runtime",
                "2",
                "--numjobs",
                "4",
                "--size",
                str(4 * int(block)),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        print(
            f"fio on this machine for {pod['metadata']['name']} (block {block} B): "
            f"{run.stdout.strip() or run.stderr.strip()}"
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "status": {
                "phase": "Succeeded" if run.returncode == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": "probe",
                        "image": "kvtier",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": run.returncode,
                                "message": run.stdout.strip() or run.stderr.strip(),
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        }
        cluster.kubectl(
            "patch",
            "pod",
            "-n",
            NAMESPACE,
            pod["metadata"]["name"],
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(status),
        )


def report(cluster: LocalCluster) -> None:
    banner("kubectl get kvt -n llm -o wide")
    print(cluster.kubectl("get", "kvt", "-n", NAMESPACE, "-o", "wide"))
    for name in ("nemotron", "llama70b", "gpt-oss"):
        tier = get_json(cluster, "kvt", "-n", NAMESPACE, name)
        status = tier.get("status") or {}
        banner(f"KVCacheTier {name} ({tier['spec'].get('mode') or 'policy default mode'})")
        for cond in status.get("conditions") or []:
            print(f"  {cond['type']:<16} {cond['status']:<6} {cond['reason']}: {cond['message']}")
        print("  sizing:", json.dumps(status.get("sizing")))
        for t in status.get("tiers") or []:
            print("  tier:", json.dumps(t))
        print("  plan:")
        for line in ((status.get("plan") or {}).get("summary") or "").splitlines():
            print(f"    {line}")
    banner("The patched InferenceService (Apply mode), as the model server will see it")
    isvc = get_json(cluster, "inferenceservice", "-n", NAMESPACE, "llama-3-1-70b")
    model = isvc["spec"]["predictor"]["model"]
    print("  args:", json.dumps(model.get("args")))
    print("  resources:", json.dumps(model.get("resources")))
    print("  volumeMounts:", json.dumps(model.get("volumeMounts")))


def not_ready(cluster: LocalCluster) -> dict[str, str]:
    """name -> "Reason: message" of each KVCacheTier in the demo namespace that is not Ready."""
    out = {}
    for tier in get_json(cluster, "kvt", "-n", NAMESPACE)["items"]:
        conditions = (tier.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c["type"] == "Ready"), None)
        if ready is None or ready["status"] != "True":
            why = f"{ready['reason']}: {ready['message']}" if ready else "no Ready condition yet"
            out[tier["metadata"]["name"]] = why
    return out


def wait_ready(cluster: LocalCluster, timeout: float = 60) -> dict[str, str]:
    """Wait for every tier to be Ready; the ones that are not when time is up, and why."""
    pending = wait("every tier to be Ready", lambda: not not_ready(cluster), timeout=timeout)
    return {} if pending else not_ready(cluster)


def run(cluster: LocalCluster, operator: OperatorProcess, scratch: Path) -> int:
    """The demo on a running control plane: 0 when every tier ends Ready, else 1."""
    banner("Fake GPU fleet (kwok nodes on a real kube-apiserver)")
    print(
        cluster.kubectl(
            "get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "kvcache.io/local-nvme"
        )
    )
    install(cluster)
    banner("Run the operator as the restricted kvtier-operator ServiceAccount")
    operator.start()
    print(f"operator healthy; metrics on {operator.metrics_url}")
    play_cephfs_provisioner(cluster)
    # The two Apply-mode tiers with a disk (NVMe, CephFS) are probed before serving.
    play_kubelet_for_probes(cluster, scratch, expected=2)
    pending = wait_ready(cluster)
    report(cluster)
    banner("Metrics (excerpt)")
    print(
        "\n".join(
            line
            for line in operator.metrics().splitlines()
            if line.startswith(("kvtier_tier_", "kvtier_probe_p99", "kvtier_crossover"))
        )
    )
    if pending:
        banner("Not every tier became Ready")
        for name, why in sorted(pending.items()):
            print(f"  {name}: {why}")
        return 1
    banner("Every tier is Ready")
    return 0


def main() -> int:
    keep = os.environ.get("KVTIER_DEMO_KEEP") == "1"
    cluster = LocalCluster(default_workdir())
    cluster.up()
    scratch = Path(tempfile.mkdtemp(prefix="kvtier-demo-fio-"))  # fio needs a real disk
    operator = OperatorProcess(
        cluster, cluster.workdir / "logs" / "operator.log", resync_seconds=None
    )
    try:
        return run(cluster, operator, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if keep:
            print(
                f"\nkept running; KUBECONFIG={cluster.admin_kubeconfig}; operator pid "
                f"{operator.proc.pid if operator.proc else '-'}"
            )
        else:
            operator.stop()
            cluster.down()
            shutil.rmtree(cluster.workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
