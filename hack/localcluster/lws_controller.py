"""LeaderWorkerSet's own controller manager, run as a process against a local control plane.

The manager is sigs.k8s.io/lws's cmd, built unchanged from its Go module by
``hack/lws/build`` (its version is the first word of the binary's stamp file). Everything it
needs on the cluster comes from the same module at that version, never written by hand:

- the CRD (config/crd/bases), also in ``localcluster.upstream_crds``;
- its identity: config/rbac's ServiceAccount, ClusterRole manager-role and its binding, with
  the names and namespace config/default's kustomization gives them (prefix ``lws-``,
  namespace ``lws-system``), as a token kubeconfig;
- its webhooks, served for real: the manager serves them on 127.0.0.1 with a certificate from
  a throwaway CA (internal certificate management off), and config/webhook's configurations,
  with that kustomization's patches applied (the pod webhooks select only LeaderWorkerSet
  pods), are registered with each service reference turned into https://127.0.0.1:<port>.

Not run: leader election (one replica), the metrics endpoint, gang scheduling.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

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

BUILD_SCRIPT = REPO / "hack" / "lws" / "build"
MODULE = "sigs.k8s.io/lws"
# config/default/kustomization.yaml: the namespace and name prefix it gives everything.
NAMESPACE = "lws-system"
PREFIX = "lws-"
SERVICE_ACCOUNT = f"{PREFIX}controller-manager"
CRD = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
RBAC = (
    "config/rbac/service_account.yaml",
    "config/rbac/role.yaml",
    "config/rbac/role_binding.yaml",
)
WEBHOOKS = "config/webhook/manifests.yaml"
# config/webhook/kustomization.yaml's patches, by the configuration they patch.
WEBHOOK_PATCHES = {
    "mutating-webhook-configuration": "config/webhook/mutating-patch.yaml",
    "validating-webhook-configuration": "config/webhook/validating-patch.yaml",
}


def build() -> Path:
    """Build (or reuse) LWS's manager; return the binary."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
    )
    if proc.returncode != 0:
        raise ClusterError(f"{BUILD_SCRIPT} failed (exit {proc.returncode})")
    return Path(proc.stdout.strip().splitlines()[-1])


def lws_version(binary: Path) -> str:
    return Path(f"{binary}.version").read_text().split()[0]


def module_dir(version: str) -> Path:
    """The module's directory in the Go module cache (`go mod download`)."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd="/",
    )
    try:
        info = json.loads(proc.stdout)
    except ValueError as exc:
        raise ClusterError(f"go mod download {MODULE}@{version}: {proc.stderr.strip()}") from exc
    if info.get("Error"):
        raise ClusterError(f"go mod download {MODULE}@{version}: {info['Error']}")
    return Path(info["Dir"])


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def rbac(module: Path) -> list[dict[str, Any]]:
    """config/rbac's identity of the manager as config/default renders it."""
    out = []
    for relative in RBAC:
        for doc in _docs(module / relative):
            doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
            if doc["kind"] == "ServiceAccount":
                doc["metadata"]["namespace"] = NAMESPACE
            if "roleRef" in doc:
                doc["roleRef"]["name"] = PREFIX + doc["roleRef"]["name"]
            for subject in doc.get("subjects", []):
                subject["name"] = PREFIX + subject["name"]
                subject["namespace"] = NAMESPACE
            out.append(doc)
    return out


def _patched(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The kustomization's JSON 6902 patch of a webhook configuration (replace ops only)."""
    out = copy.deepcopy(doc)
    for op in ops:
        parts = op["path"].strip("/").split("/")
        if op["op"] != "replace" or len(parts) != 2 or parts[0] != "webhooks":
            raise ClusterError(f"an LWS webhook patch op this harness cannot apply: {op}")
        out["webhooks"][int(parts[1])] = copy.deepcopy(op["value"])
    return out


def webhook_configurations(module: Path, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """config/webhook's configurations as its kustomization patches them, each service
    reference turned into `url`, named with config/default's prefix."""
    out = []
    for doc in _docs(module / WEBHOOKS):
        name = doc["metadata"]["name"]
        if name in WEBHOOK_PATCHES:
            [ops] = [yaml.safe_load((module / WEBHOOK_PATCHES[name]).read_text())]
            doc = _patched(doc, ops)
        doc["metadata"] = {"name": PREFIX + name}
        for hook in doc["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": url + service["path"], "caBundle": ca_bundle}
        out.append(doc)
    return out


class LWSController:
    """LWS's manager on `cluster`, with its files (CA, config, kubeconfig, log) in a directory
    of its own under `workdir`."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir / "lws-controller"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.binary = build()
        self.version = lws_version(self.binary)
        self.module = module_dir(self.version)
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "lws-manager.log"

    def install(self) -> None:
        """The CRD, namespace and identity the manager needs at start."""
        self.cluster.install_crds(self.module / CRD)
        self.cluster.kubectl("create", "namespace", NAMESPACE)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac(self.module)))

    def _config(self, certs: Path) -> Path:
        """The manager's Configuration (config.lws.x-k8s.io/v1alpha1)."""
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},  # the throwaway CA's certificate
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},  # controller-runtime: no metrics server
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
        }
        path = self.workdir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self) -> LWSController:
        self.install()
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(pki)
        serving = ca.issue("webhook", "lws-webhook-service", server=True)
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "tls.crt").write_bytes(serving.cert.read_bytes())
        (certs / "tls.key").write_bytes(serving.key.read_bytes())
        token = self.cluster.kubectl(
            "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=48h"
        ).strip()
        kubeconfig = write_kubeconfig(
            self.workdir / "lws.kubeconfig",
            self.cluster.server,
            self.cluster.workdir / "pki" / "ca.crt",
            SERVICE_ACCOUNT,
            token=token,
        )
        logf = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            tied([str(self.binary), f"--config={self._config(certs)}", "--zap-log-level=info"]),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", ""), "KUBECONFIG": str(kubeconfig)},
            start_new_session=True,
        )
        logf.close()
        try:
            wait_manager_ready(
                self.proc, "lws manager", self.health_port, self.webhook_port, self.log_tail
            )
            bundle = base64.b64encode(ca.pair.cert.read_bytes()).decode()
            docs = webhook_configurations(
                self.module, f"https://127.0.0.1:{self.webhook_port}", bundle
            )
            self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        except BaseException:
            self.stop()
            raise
        log(f"LWS {self.version} manager running (pid {self.proc.pid})")
        return self

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
