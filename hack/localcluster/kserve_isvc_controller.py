"""KServe's own InferenceService controller, run as a process against a local control plane.

The manager is KServe's cmd/manager (the kserve-controller-manager KServe ships), built
unchanged from its Go module by ``hack/oracles/kserve/build --isvc-controller`` (``make
kserve``). Everything it gets on the cluster comes from the same KServe module (its version is
the first word of the binary's stamp file), never written by hand:

- KServe's CRDs as its config/crd kustomization renders them (InferenceService,
  ServingRuntime, ClusterServingRuntime, TrainedModel, InferenceGraph,
  ClusterStorageContainer), rendered by the kubectl built for the control plane;
- its identity: config/rbac's ServiceAccount kserve-controller-manager, ClusterRole and
  bindings and leader-election Role in the ``kserve`` namespace (not its metrics auth proxy),
  as a token kubeconfig;
- its configuration: config/configmap/inferenceservice.yaml in ``kserve``, with one change:
  ``deploy.defaultDeploymentMode`` Standard (RawDeployment: plain Deployments, as OpenShift AI
  runs KServe; KServe ships Serverless, which needs Knative);
- its webhooks, served for real: the manager serves them on a free port with a certificate
  from a throwaway CA, and config/webhook/manifests.yaml's Mutating/ValidatingWebhookConfigurations
  (the InferenceService defaulter and validator, the pod mutator, the ServingRuntime,
  ClusterServingRuntime, TrainedModel and InferenceGraph validators) are registered with each
  service reference turned into https://127.0.0.1:<port>;
- KServe's ClusterServingRuntimes (config/runtimes, images set by its kustomization),
  admitted through its own ClusterServingRuntime webhook.

The pods kube-controller-manager makes of KServe's Deployments go through KServe's pod
webhook (storage initializer, PVC mount) and are run by kwok.

Not run: leader election (one replica), the metrics endpoint, cert-manager (the CA above
plays its part), Knative, Istio, KEDA (their CRDs absent: the manager skips them). KServe
v0.20.0 deletes a multi-node InferenceService's worker Deployment and head/worker Services in
the reconcile that created them (kserve/kserve#6113, fixed after v0.20.0): on this cluster as
on a real one, the worker Deployment comes and goes.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

from kserve_controller import KSERVE_MODULE, Module, download
from localcluster import (
    REPO,
    CertificateAuthority,
    ClusterError,
    LocalCluster,
    free_port,
    log,
    tied,
    wait_manager_ready,
    write_kubeconfig,
)

BUILD_SCRIPT = REPO / "hack" / "oracles" / "kserve" / "build"
NAMESPACE = "kserve"  # KServe's constants.KServeNamespace (POD_NAMESPACE)
SERVICE_ACCOUNT = "kserve-controller-manager"
CRDS = "config/crd"
RBAC = (
    "config/rbac/service_account.yaml",
    "config/rbac/role.yaml",
    "config/rbac/role_binding.yaml",
    "config/rbac/leader_election_role.yaml",
    "config/rbac/leader_election_role_binding.yaml",
)
CONFIGMAP = "config/configmap/inferenceservice.yaml"
WEBHOOKS = "config/webhook/manifests.yaml"
RUNTIMES = "config/runtimes"
DEPLOYMENT_MODE = "Standard"


def build() -> Path:
    """KServe's manager as `make kserve` built it (the build script reuses it)."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--isvc-controller"],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ClusterError(f"{BUILD_SCRIPT.name} --isvc-controller failed (exit {proc.returncode})")
    return Path(proc.stdout.strip().splitlines()[-1])


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rbac(kserve: Module) -> list[dict[str, Any]]:
    """config/rbac's manager identity in `kserve`, as config/default's kustomization puts it."""
    out = []
    for relative in RBAC:
        for doc in _docs((kserve.dir / relative).read_text()):
            if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
                doc["metadata"]["namespace"] = NAMESPACE
            for subject in doc.get("subjects", []):
                subject["namespace"] = NAMESPACE
            out.append(doc)
    return out


def config_map(kserve: Module) -> dict[str, Any]:
    """KServe's inferenceservice-config with the default deployment mode Standard."""
    [doc] = _docs((kserve.dir / CONFIGMAP).read_text())
    deploy = json.loads(doc["data"]["deploy"])
    deploy["defaultDeploymentMode"] = DEPLOYMENT_MODE
    doc["data"]["deploy"] = json.dumps(deploy)
    doc["metadata"]["namespace"] = NAMESPACE
    return dict(doc)


def webhook_configurations(kserve: Module, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """KServe's webhook configurations with each service reference turned into `url`."""
    out = []
    for doc in _docs((kserve.dir / WEBHOOKS).read_text()):
        doc["metadata"].pop("creationTimestamp", None)
        for hook in doc["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": url + service["path"], "caBundle": ca_bundle}
        out.append(doc)
    return out


class KServeISVCController:
    """KServe's InferenceService manager on `cluster`, with its files (CA, kubeconfig, log) in
    a directory of its own under `workdir`."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir / "kserve-isvc"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.binary = build()
        version = Path(f"{self.binary}.version").read_text().split()[0]
        self.kserve = download(KSERVE_MODULE, version)
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "kserve-manager.log"

    def kustomize(self, relative: str) -> str:
        """A kustomization of KServe's module, rendered by the cluster's kubectl."""
        return self.cluster.kubectl("kustomize", str(self.kserve.dir / relative))

    def install(self) -> None:
        """The CRDs, namespace, identity and configuration the manager reads at start."""
        crds = self.workdir / "crds.yaml"
        crds.write_text(self.kustomize(CRDS))
        self.cluster.install_crds(crds)
        self.cluster.kubectl("create", "namespace", NAMESPACE)
        docs = [*rbac(self.kserve), config_map(self.kserve)]
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))

    def start(self) -> KServeISVCController:
        self.install()
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(pki)
        serving = ca.issue("webhook", "kserve-webhook-server", server=True)
        # controller-runtime's default certificate directory, under the process's TMPDIR.
        tmp = self.workdir / "tmp"
        certs = tmp / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "tls.crt").write_bytes(serving.cert.read_bytes())
        (certs / "tls.key").write_bytes(serving.key.read_bytes())
        token = self.cluster.kubectl(
            "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=48h"
        ).strip()
        kubeconfig = write_kubeconfig(
            self.workdir / "kserve-manager.kubeconfig",
            self.cluster.server,
            self.cluster.workdir / "pki" / "ca.crt",
            SERVICE_ACCOUNT,
            token=token,
        )
        logf = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            tied(
                [
                    str(self.binary),
                    f"--kubeconfig={kubeconfig}",
                    f"--webhook-port={self.webhook_port}",
                    f"--health-probe-addr=127.0.0.1:{self.health_port}",
                    "--metrics-addr=0",  # controller-runtime: no metrics server
                    "--zap-encoder=console",
                ]
            ),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={
                "PATH": os.environ.get("PATH", ""),
                "POD_NAMESPACE": NAMESPACE,
                # The defaulting webhook opens a client of its own (controller-runtime's
                # config.GetConfig): the same identity.
                "KUBECONFIG": str(kubeconfig),
                "TMPDIR": str(tmp),
            },
            start_new_session=True,
        )
        logf.close()
        try:
            wait_manager_ready(
                self.proc, "kserve manager", self.health_port, self.webhook_port, self.log_tail
            )
            self._register_webhooks(ca)
            # KServe's own runtimes, through its ClusterServingRuntime webhook.
            self.cluster.kubectl("apply", "-f", "-", stdin=self.kustomize(RUNTIMES))
        except BaseException:
            self.stop()
            raise
        log(f"KServe {self.kserve.version} InferenceService manager running (pid {self.proc.pid})")
        return self

    def _register_webhooks(self, ca: CertificateAuthority) -> None:
        bundle = base64.b64encode(ca.pair.cert.read_bytes()).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        docs = webhook_configurations(self.kserve, url, bundle)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))

    def runtimes(self) -> list[dict[str, Any]]:
        """KServe's ClusterServingRuntimes as installed (its kustomization's rendering)."""
        return _docs(self.kustomize(RUNTIMES))

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Stop the manager this object started (its own process group only)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
