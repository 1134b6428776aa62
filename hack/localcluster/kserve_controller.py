"""KServe's own LLMInferenceService controller, run as a process against a local control plane.

The manager is KServe's cmd/llmisvc, built unchanged from its Go module by
``hack/oracles/kserve/build --controller``. Everything it needs on the cluster comes from the
same KServe module (its version is the first word of the binary's stamp file) or from the
modules KServe's go.mod requires, never written by hand:

- the CRDs it watches: LeaderWorkerSet (sigs.k8s.io/lws), the Gateway API standard channel
  (sigs.k8s.io/gateway-api), InferencePool and the inference extension's other kinds
  (sigs.k8s.io/gateway-api-inference-extension), at the versions KServe's go.mod requires;
  KServe's own CRDs are the cluster's (``localcluster.upstream_crds``);
- its identity: the ServiceAccount, ClusterRole and bindings of config/rbac/llmisvc in the
  ``kserve`` namespace, as a token kubeconfig;
- its configuration: config/configmap/inferenceservice.yaml and the config/llmisvcconfig
  presets, in ``kserve``;
- its webhooks, served for real: the manager serves them on a free port with a certificate
  from a throwaway CA, and config/webhook/llmisvc's Mutating/ValidatingWebhookConfigurations
  and config/crd/full/llmisvc's conversion patches are registered with each service reference
  turned into https://127.0.0.1:<port> (the only change made to KServe's manifests).

Not run: leader election (one replica), the metrics endpoint, cert-manager (the CA above
plays its part); on the cluster, no LeaderWorkerSet controller and no gateway.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
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

BUILD_SCRIPT = REPO / "hack" / "oracles" / "kserve" / "build"
NAMESPACE = "kserve"  # KServe's constants.KServeNamespace (POD_NAMESPACE)
SERVICE_ACCOUNT = "llmisvc-controller-manager"
KSERVE_MODULE = "github.com/kserve/kserve"
# The modules whose CRDs the manager watches, and the files of each (under the module root).
CRD_MODULES = {
    "sigs.k8s.io/lws": ("config/crd/bases", "leaderworkerset.x-k8s.io_*.yaml"),
    "sigs.k8s.io/gateway-api": ("config/crd/standard", "gateway.networking.k8s.io_*.yaml"),
    "sigs.k8s.io/gateway-api-inference-extension": ("config/crd/bases", "inference.*.yaml"),
}
# Files of the Gateway API's standard channel that are not CRDs (a ValidatingAdmissionPolicy).
NOT_CRDS = ("_vap_",)
WEBHOOKS = "config/webhook/llmisvc/manifests.yaml"
CONVERSION_PATCHES = (
    "config/crd/full/llmisvc/llmisvc_conversion_webhook_patch.yaml",
    "config/crd/full/llmisvc/llmisvcconfig_conversion_webhook_patch.yaml",
)
RBAC_DIR = "config/rbac/llmisvc"
CONFIGMAP = "config/configmap/inferenceservice.yaml"
PRESETS = "config/llmisvcconfig"


def build() -> Path:
    """Build (or reuse) KServe's manager; return the binary."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--controller"], stdout=subprocess.PIPE, text=True, check=False
    )
    if proc.returncode != 0:
        raise ClusterError(f"{BUILD_SCRIPT.name} --controller failed (exit {proc.returncode})")
    return Path(proc.stdout.strip().splitlines()[-1])


def kserve_version(binary: Path) -> str:
    """The KServe version the binary was built from (its stamp's first word)."""
    return Path(f"{binary}.version").read_text().split()[0]


@dataclass(frozen=True)
class Module:
    path: str
    version: str
    dir: Path
    gomod: Path


def download(path: str, version: str) -> Module:
    """A module from the Go module proxy (or the module cache), by `go mod download`."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{path}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd="/",
    )
    try:
        info = json.loads(proc.stdout)
    except ValueError as exc:
        raise ClusterError(f"go mod download {path}@{version}: {proc.stderr.strip()}") from exc
    if info.get("Error"):
        raise ClusterError(f"go mod download {path}@{version}: {info['Error']}")
    return Module(path, version, Path(info["Dir"]), Path(info["GoMod"]))


def required_version(gomod: Path, module: str) -> str:
    """The version `module` is required at in a go.mod (a replace of it would win: refused)."""
    text = gomod.read_text()
    if re.search(rf"^\s*(replace\s+)?{re.escape(module)}\s+(v\S+\s+)?=>", text, re.M):
        raise ClusterError(f"{gomod}: {module} is replaced; read the replacement instead")
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not found:
        raise ClusterError(f"{gomod} does not require {module}")
    return found.group(1)


def crd_files(kserve: Module) -> list[Path]:
    """The CRD files of the kinds the manager watches besides KServe's own."""
    files: list[Path] = []
    for module, (directory, pattern) in CRD_MODULES.items():
        dep = download(module, required_version(kserve.gomod, module))
        found = sorted(
            f for f in (dep.dir / directory).glob(pattern) if not any(n in f.name for n in NOT_CRDS)
        )
        if not found:
            raise ClusterError(f"{module}@{dep.version} has no {directory}/{pattern}")
        files += found
    return files


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def webhook_configurations(kserve: Module, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """KServe's webhook configurations with each service reference turned into `url`."""
    out = []
    for doc in _docs(kserve.dir / WEBHOOKS):
        doc["metadata"].pop("creationTimestamp", None)
        for hook in doc["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": url + service["path"], "caBundle": ca_bundle}
        out.append(doc)
    return out


def conversion_patches(kserve: Module, url: str, ca_bundle: str) -> Iterator[tuple[str, str]]:
    """(CRD name, merge patch) of KServe's conversion-webhook patches, by URL."""
    for relative in CONVERSION_PATCHES:
        [doc] = _docs(kserve.dir / relative)
        webhook = doc["spec"]["conversion"]["webhook"]
        service = webhook["clientConfig"].pop("service")
        webhook["clientConfig"] = {"url": url + service["path"], "caBundle": ca_bundle}
        yield doc["metadata"]["name"], json.dumps({"spec": doc["spec"]})


def rbac(kserve: Module) -> list[dict[str, Any]]:
    """config/rbac/llmisvc as its kustomization renders it: in `kserve`, the service account
    named where the kustomization substitutes it."""
    out = []
    for path in sorted((kserve.dir / RBAC_DIR).glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in _docs(path):
            if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
                doc["metadata"]["namespace"] = NAMESPACE
            for subject in doc.get("subjects", []):
                subject["name"] = SERVICE_ACCOUNT
                subject["namespace"] = NAMESPACE
            out.append(doc)
    return out


class KServeController:
    """KServe's manager on `cluster`, with its files (CA, kubeconfig, log) in a directory of
    its own under `workdir`."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir / "kserve-llmisvc"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.binary = build()
        version = kserve_version(self.binary)
        self.kserve = download(KSERVE_MODULE, version)
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "llmisvc-manager.log"

    def install(self) -> None:
        """The CRDs, namespace, identity and configuration the manager reads at start."""
        self.cluster.install_crds(*crd_files(self.kserve))
        self.cluster.kubectl("create", "namespace", NAMESPACE)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac(self.kserve)))
        self.cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(self.kserve.dir / CONFIGMAP))

    def start(self) -> KServeController:
        self.install()
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(pki)
        serving = ca.issue("webhook", "llmisvc-webhook-server", server=True)
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
            self.workdir / "llmisvc.kubeconfig",
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
                "TMPDIR": str(tmp),
            },
            start_new_session=True,
        )
        logf.close()
        try:
            wait_manager_ready(
                self.proc, "llmisvc manager", self.health_port, self.webhook_port, self.log_tail
            )
            self._register_webhooks(ca)
            # The presets go through KServe's own LLMInferenceServiceConfig validation.
            for preset in sorted((self.kserve.dir / PRESETS).glob("config-*.yaml")):
                self.cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(preset))
        except BaseException:
            self.stop()
            raise
        log(f"KServe {self.kserve.version} llmisvc manager running (pid {self.proc.pid})")
        return self

    def _register_webhooks(self, ca: CertificateAuthority) -> None:
        bundle = base64.b64encode(ca.pair.cert.read_bytes()).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        docs = webhook_configurations(self.kserve, url, bundle)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        for crd, patch in conversion_patches(self.kserve, url, bundle):
            self.cluster.kubectl("patch", "crd", crd, "--type=merge", "-p", patch)

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
