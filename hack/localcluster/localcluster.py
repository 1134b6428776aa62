"""A real local Kubernetes control plane for kvtier's tests and demo.

etcd, kube-apiserver (TLS, client certificates, RBAC, service-account keys),
kube-controller-manager, kube-scheduler and kwok (fake GPU nodes whose pods
reach Running) run as plain processes on loopback. Binaries come from
``hack/localcluster/build``, which compiles them from Go modules into a cache; the real CRDs
of the foreign kinds (KServe, Rook) from ``hack/localcluster/upstream-crds``, which fetches
them from Go modules into the same cache (``upstream_crds()``); ``install_upstream_crds``
serves them from a capture of their stored form when one is cached (stored_crds.py).

Used as a CLI (``hack/localcluster/localcluster up|down|env|status``) and from
Python (``LocalCluster(workdir).up()``, as tests/conftest.py does).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import functools
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import stored_crds

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD_SCRIPT = HERE / "build"
CRDS_SCRIPT = HERE / "upstream-crds"
CRD_VARIANTS = ("full", "minimal", "monitoring")
KWOK_STAGES = HERE / "kwok-stages.yaml"

GPU_NODES = 8
NODE_NAME = "gpu-node-{}"
NVME_LABEL = "kvcache.io/local-nvme"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
OPERATOR_NAMESPACE = "kvtier-system"
OPERATOR_SA = "kvtier-operator"
# Manifests that grant the operator identity its permissions; applied at `up`.
RBAC_MANIFEST = REPO / "deploy" / "manifests" / "rbac.yaml"
# kwok's own options; the parallelism settings have no usable zero default. The fake nodes'
# leases last an hour (kwok renews them every quarter of that) and the controller manager
# waits NODE_GRACE before it calls a node unhealthy: no test depends on a node's heartbeat,
# and renewing eight leases every 10 s was about a fifth of an idle control plane's CPU
# (5.4 % of a core against 4.1 %, measured with the upstream CRDs; a suite keeps about
# twelve control planes up at once).
NODE_LEASE_SECONDS = 3600
NODE_GRACE = f"{2 * NODE_LEASE_SECONDS}s"
KWOK_CONFIG = {
    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
    "kind": "KwokConfiguration",
    "options": {
        "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
        "nodeLeaseParallelism": 4,
        "nodePlayStageParallelism": 4,
        "podPlayStageParallelism": 8,
        "podsOnNodeSyncParallelism": 4,
        "enablePodsOnNodeSyncListPager": True,
        "enablePodsOnNodeSyncStreamWatch": True,
    },
}
# How kubectl names a CRD it applied: "customresourcedefinition.apiextensions.k8s.io/NAME".
CRD_PREFIX = "customresourcedefinition.apiextensions.k8s.io/"
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)


class ClusterError(RuntimeError):
    """The control plane could not be built, started or reached."""


def log(msg: str) -> None:
    print(f"[localcluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_binaries(helm: bool = False) -> Path:
    """Build (or reuse) the control-plane binaries, and helm when asked (only the chart's
    rendering and tests use it: a cluster never waits for its build); return their
    directory."""
    env = {**os.environ, "KVTIER_BUILD_HELM": "1" if helm else "0"}
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False, env=env
    )
    if proc.returncode != 0:
        raise ClusterError(f"{BUILD_SCRIPT.name} failed with exit code {proc.returncode}")
    return Path(proc.stdout.strip().splitlines()[-1])


def upstream_crds(variant: str = "full") -> Path:
    """The directory of KServe's and Rook's own CRDs in one variant (``full``: KServe's full
    schemas; ``minimal``: KServe's minimal ones), fetched at pinned versions or reused."""
    if variant not in CRD_VARIANTS:
        raise ValueError(f"unknown CRD variant {variant!r} (known: {', '.join(CRD_VARIANTS)})")
    cache = tuple(os.environ.get(k) for k in ("KVTIER_CACHE_DIR", "XDG_CACHE_HOME", "HOME"))
    return _fetched_crds(variant, cache)


@functools.cache
def _fetched_crds(variant: str, cache: tuple[str | None, ...]) -> Path:
    """upstream_crds once per process and cache location: the golden cases and the served
    schemas ask for the directory hundreds of times. A failed fetch is not kept."""
    proc = subprocess.run(
        ["bash", str(CRDS_SCRIPT), variant], stdout=subprocess.PIPE, text=True, check=False
    )
    if proc.returncode != 0:
        raise ClusterError(
            f"{CRDS_SCRIPT.name} {variant} failed with exit code {proc.returncode}: the real "
            "CRDs could not be fetched from the Go module proxy (see its log above)"
        )
    directory = Path(proc.stdout.strip().splitlines()[-1]) / variant
    if not any(directory.glob("*.yaml")):
        raise ClusterError(f"{CRDS_SCRIPT.name} {variant} left no CRD files in {directory}")
    return directory


def tied(argv: Sequence[str]) -> list[str]:
    """`argv`, run so that the kernel stops it when the process that started it dies, when
    the test suite asks (KVTIER_STOP_WITH_PARENT=1, tests/conftest.py). Components run in
    sessions of their own, out of reach of a terminal's Ctrl-C, so that their starter stops
    them in order; a test worker killed before its teardown (pytest-xdist kills the workers
    it cannot stop in time) would leave them running. SIGKILL, not SIGTERM: no orderly stop
    is owed once the starter is gone, and one was seen to hang (an API server whose etcd
    went at the same moment kept shutting down, and an operator kept waiting on it).
    `setpriv` is util-linux's."""
    setpriv = shutil.which("setpriv")
    if os.environ.get("KVTIER_STOP_WITH_PARENT") == "1" and setpriv:
        return [setpriv, "--pdeathsig", "KILL", "--", *argv]
    return list(argv)


# Ports handed to the components the clusters and tests start: below Linux's default
# ephemeral range (32768-60999), so no outgoing connection takes one meanwhile, and in turn
# across every process of the machine (PORT_LEDGER keeps the last one handed out, under a
# lock). The kernel's own pick (a bind to port 0, closed at once) could be handed to another
# worker before the first component bound it: a KServe manager's readiness check then
# reached another cluster's webhook server, and the API server refused its certificate.
PORTS = range(20000, 32768)
PORT_LEDGER = Path(tempfile.gettempdir()) / "kvtier-ports"


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on that no caller on this machine was handed in
    the last len(PORTS) calls."""
    with PORT_LEDGER.open("a+", encoding="utf-8") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)  # released when the file closes
        ledger.seek(0)
        text = ledger.read().strip()
        last = int(text) if text.isdigit() and int(text) in PORTS else PORTS.start - 1
        for step in range(1, len(PORTS) + 1):
            port = PORTS.start + (last - PORTS.start + step) % len(PORTS)
            if _bindable(port):
                ledger.seek(0)
                ledger.truncate()
                ledger.write(str(port))
                return port
    raise ClusterError(f"no free port in {PORTS.start}-{PORTS.stop - 1} on 127.0.0.1")


def _bindable(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# --------------------------------------------------------------------- certs


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class CertificateAuthority:
    """A throwaway CA that signs the serving and client certificates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("kvtier-local-ca"))
            .issuer_name(_name("kvtier-local-ca"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        self.pair.cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.pair.key, self.key)

    def issue(
        self,
        name: str,
        common_name: str,
        org: str | None = None,
        *,
        server: bool = False,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, org))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes.default.svc"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
                    ]
                ),
                critical=False,
            )
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(
            builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        )
        _write_key(pair.key, key)
        return pair


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    user: str,
    *,
    client: KeyPair | None = None,
    token: str | None = None,
) -> Path:
    credentials: dict[str, str] = {}
    if client:
        credentials = {
            "client-certificate": str(client.cert),
            "client-key": str(client.key),
        }
    if token:
        credentials = {"token": token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=True))
    path.chmod(0o600)
    return path


# ----------------------------------------------------------------- processes


@dataclass
class Component:
    name: str
    argv: list[str]

    def pid_file(self, workdir: Path) -> Path:
        return workdir / "pids" / f"{self.name}.pid"

    def log_file(self, workdir: Path) -> Path:
        return workdir / "logs" / f"{self.name}.log"


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


AUDIT_CONTROL = "kvtier-audit-control"  # the ConfigMap every cluster's audit log must record


def audited(audit_log: Path, verb: str, resource: str, name: str) -> bool:
    """Whether the audit log records a completed `verb` of `resource` `name`."""
    if not audit_log.exists():
        return False
    for line in audit_log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        ref = entry.get("objectRef") or {}
        if (
            entry.get("stage") == "ResponseComplete"
            and entry.get("verb") == verb
            and ref.get("resource") == resource
            and ref.get("name") == name
        ):
            return True
    return False


def _wait(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class LocalCluster:
    """One control plane rooted in ``workdir`` (certs, data, logs, pid files)."""

    workdir: Path
    nodes: int = GPU_NODES
    bin_dir: Path | None = None
    components: dict[str, Component] = field(default_factory=dict)

    # Paths other code relies on.
    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        return self.workdir / "operator.kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.workdir / "cluster.json"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    @property
    def server(self) -> str:
        return str(json.loads(self.state_file.read_text())["server"])

    def binary(self, name: str) -> str:
        assert self.bin_dir is not None
        if name == "helm" and not (self.bin_dir / name).exists():
            build_binaries(helm=True)  # not built with the cluster: only the chart needs it
        return str(self.bin_dir / name)

    # ------------------------------------------------------------- lifecycle

    def up(self) -> LocalCluster:
        """Start every component, create the fake GPU nodes and both identities."""
        if self.state_file.exists() and self.running():
            log(f"already running in {self.workdir}")
            return self
        self.bin_dir = self.bin_dir or build_binaries()
        for sub in ("pki", "pids", "logs", "etcd"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self._configure()
            for name in COMPONENTS:
                self.start(name)
                if name == "kube-apiserver":
                    self._wait_apiserver()
            self._bootstrap()
        except BaseException:
            self.down()
            raise
        log(f"control plane up in {time.monotonic() - started:.1f}s at {self.server}")
        return self

    def _configure(self) -> None:
        pki = self.workdir / "pki"
        ca = CertificateAuthority(pki)
        serving = ca.issue("apiserver", "kube-apiserver", server=True)
        admin = ca.issue("admin", "kvtier-admin", "system:masters")
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki / "sa.key", sa_key)
        (pki / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        ports = {n: free_port() for n in ("etcd", "etcd-peer", "apiserver", "kcm", "sched")}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        write_kubeconfig(self.admin_kubeconfig, server, ca.pair.cert, "admin", client=admin)
        audit_policy = self.workdir / "audit-policy.yaml"
        # Metadata-level audit of writes only: tests count the operator's writes.
        audit_policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        {
                            "level": "Metadata",
                            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
                        },
                        {"level": "None"},
                    ],
                }
            )
        )
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        kubeconfig = str(self.admin_kubeconfig)
        self.components = {
            "etcd": Component(
                "etcd",
                [
                    self.binary("etcd"),
                    "--name=local",
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=local={peer_url}",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                ],
            ),
            "kube-apiserver": Component(
                "kube-apiserver",
                [
                    self.binary("kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['apiserver']}",
                    f"--tls-cert-file={serving.cert}",
                    f"--tls-private-key-file={serving.key}",
                    f"--client-ca-file={ca.pair.cert}",
                    "--authorization-mode=RBAC",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--endpoint-reconciler-type=none",
                    f"--cert-dir={pki}",
                    f"--audit-policy-file={audit_policy}",
                    f"--audit-log-path={self.audit_log}",
                    "--audit-log-format=json",
                    # Server-side applies of KServe's largest CRDs, which the test modules
                    # install side by side on this 2-core machine, have taken over the
                    # default minute under that load; the tests bound their own waits.
                    "--request-timeout=5m",
                    "--profiling=false",
                ],
            ),
            "kube-controller-manager": Component(
                "kube-controller-manager",
                [
                    self.binary("kube-controller-manager"),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['kcm']}",
                    "--leader-elect=false",
                    "--controllers=*",
                    f"--node-monitor-grace-period={NODE_GRACE}",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={ca.pair.cert}",
                    "--use-service-account-credentials=false",
                    "--profiling=false",
                ],
            ),
            "kube-scheduler": Component(
                "kube-scheduler",
                [
                    self.binary("kube-scheduler"),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['sched']}",
                    "--leader-elect=false",
                    "--profiling=false",
                ],
            ),
            "kwok": Component(
                "kwok",
                [
                    self.binary("kwok"),
                    f"--kubeconfig={kubeconfig}",
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--cidr=10.244.0.0/16",
                    "--node-ip=10.244.255.254",
                    f"--config={self.workdir / 'kwok.yaml'}",
                ],
            ),
        }
        (self.workdir / "kwok.yaml").write_text(
            yaml.safe_dump(KWOK_CONFIG) + "---\n" + KWOK_STAGES.read_text()
        )
        state = {
            "server": server,
            "ports": ports,
            "bin_dir": str(self.bin_dir),
            "components": {n: c.argv for n, c in self.components.items()},
        }
        self.state_file.write_text(json.dumps(state, indent=2, sort_keys=True))

    def _load(self) -> None:
        state = json.loads(self.state_file.read_text())
        self.bin_dir = Path(state["bin_dir"])
        self.components = {n: Component(n, argv) for n, argv in state["components"].items()}

    def start(self, name: str) -> None:
        """Start one component (again); its pid file records the process."""
        if not self.components:
            self._load()
        comp = self.components[name]
        logf = comp.log_file(self.workdir).open("ab")
        proc = subprocess.Popen(
            tied(comp.argv),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        logf.close()
        comp.pid_file(self.workdir).write_text(str(proc.pid))
        time.sleep(0.2)
        if proc.poll() is not None:
            raise ClusterError(
                f"{name} exited with code {proc.returncode}; see {comp.log_file(self.workdir)}"
            )
        if name == "etcd":
            port = json.loads(self.state_file.read_text())["ports"]["etcd"]
            _wait(lambda: _http_ok(f"http://127.0.0.1:{port}/health"), 30, "etcd health")

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        """Stop one component started by this cluster (only the pid it recorded)."""
        pid_file = self.workdir / "pids" / f"{name}.pid"
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text())
        if process_alive(pid):
            with suppress(ProcessLookupError):
                os.killpg(pid, sig)
            deadline = time.monotonic() + timeout
            while process_alive(pid) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.1)
            if process_alive(pid):
                os.killpg(pid, signal.SIGKILL)
                _wait(lambda: _reap(pid) or not process_alive(pid), 10, f"{name} to die")
        _reap(pid, block=_zombie(pid))
        pid_file.unlink()

    def down(self) -> None:
        """Stop exactly the processes `up` started, newest first."""
        for name in reversed(COMPONENTS):
            self.stop(name)

    def running(self) -> bool:
        pid_files = list((self.workdir / "pids").glob("*.pid"))
        return bool(pid_files) and all(process_alive(int(p.read_text())) for p in pid_files)

    # ----------------------------------------------------------- bootstrap

    def _admin_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.workdir / "pki" / "ca.crt"))
        ctx.load_cert_chain(self.workdir / "pki" / "admin.crt", self.workdir / "pki" / "admin.key")
        return ctx

    def _wait_apiserver(self) -> None:
        url, ctx = f"{self.server}/readyz", self._admin_context()
        _wait(lambda: _http_ok(url, ctx), 120, "kube-apiserver /readyz", interval=0.5)

    def kubectl(self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
        """Run kubectl from the build cache against this cluster; raise on failure."""
        if self.bin_dir is None:
            self._load()
        proc = subprocess.run(
            [self.binary("kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{json.loads(self.state_file.read_text())['ports']['etcd']}"

    def install_crds(self, *paths: Path) -> None:
        """Apply CRD files or directories server-side (the upstream CRDs are too large for
        client-side apply's last-applied annotation) and wait until those are Established
        (only those: a list of every CRD would carry all 8 MB of the upstream schemas), then
        until the API server serves them (wait_served)."""
        names: list[str] = []
        for path in paths:
            out = self.kubectl("apply", "--server-side", "-f", str(path))
            names += [
                line.split()[0].removeprefix(CRD_PREFIX)
                for line in out.splitlines()
                if line.startswith(CRD_PREFIX)
            ]
        self.wait_served(stored_crds.served_by(self.wait_established(*names)))

    def install_upstream_crds(self, variant: str = "full") -> None:
        """The upstream CRDs of `variant`: their stored form written into etcd when a
        capture of it is cached and none of them is here yet (stored_crds.py says why),
        else applied through the API."""
        directory = upstream_crds(variant)
        if self.bin_dir is None:
            self._load()
        stored = stored_crds.load(directory, apiserver_version(self.binary("kube-apiserver")))
        if stored is not None and stored_crds.write_if_absent(self.etcd_url, stored.objects):
            self.wait_served(stored.served())
        else:
            self.install_crds(directory)

    def wait_served(self, resources: Sequence[stored_crds.Served], timeout: float = 60) -> None:
        """Wait until clients can use every one of `resources`: discovery lists it and
        /openapi/v3 describes it (stored_crds.unserved says why both)."""
        ctx = self._admin_context()
        left = list(resources)

        def get(path: str) -> dict[str, Any] | None:
            try:
                with urllib.request.urlopen(self.server + path, timeout=10, context=ctx) as resp:
                    found: dict[str, Any] = json.loads(resp.read())
                    return found
            except OSError:  # 404 until the API server has it; a refused or slow answer
                return None

        def served() -> bool:
            left[:] = stored_crds.unserved(left, get)
            return not left

        _wait(served, timeout, f"the API server to serve {len(resources)} resources of CRDs", 0.2)

    def wait_established(self, *names: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Wait until the named CRDs (every CRD, when none is named) are Established; the
        CRDs as then read. Polled: `kubectl wait --for=condition=Established` fails at once
        on a CRD whose status holds no condition yet, as a just-created one may on a loaded
        machine."""
        items: list[dict[str, Any]] = []

        def established() -> bool:
            try:  # a CRD not served yet is a wait too
                found = json.loads(self.kubectl("get", "crd", *names, "-o", "json"))
            except ClusterError:
                return False
            items[:] = found.get("items", [found])
            return bool(items) and all(
                any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in (crd.get("status") or {}).get("conditions") or []
                )
                for crd in items
            )

        _wait(established, timeout, f"CRDs Established: {', '.join(names) or 'all'}", 0.5)
        return items

    def restart_if_exited(self, name: str) -> bool:
        """Start `name` again if the process it recorded has exited; whether it had."""
        pid = int((self.workdir / "pids" / f"{name}.pid").read_text())
        if process_alive(pid):
            return False
        _reap(pid, block=_zombie(pid))
        log(f"{name} exited; starting it again (its log: {self.workdir / 'logs'})")
        self.start(name)
        return True

    def _bootstrap(self) -> None:
        def default_service_account() -> bool:
            # The controller manager exits when the API server is not healthy within 10 s of
            # its start (cmd/kube-controller-manager), as on a machine where several control
            # planes start at once; its own comment asks to start it with the API server.
            self.restart_if_exited("kube-controller-manager")
            return _succeeds(lambda: self.kubectl("get", "serviceaccount", "default"))

        _wait(default_service_account, 60, "the default ServiceAccount (controller-manager)")
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(fake_gpu_nodes(self.nodes)))
        self._operator_identity()
        _wait(self._nodes_ready, 60, f"{self.nodes} Ready GPU nodes (kwok)")
        self._audit_control()

    def _audit_control(self) -> None:
        """The positive control of every test that counts writes in the audit log: a known
        write (a ConfigMap made here) must be there, else the cluster audits nothing and a
        "0 writes" check would pass vacuously."""
        self.kubectl("create", "configmap", AUDIT_CONTROL, "-n", "default")
        _wait(
            lambda: audited(self.audit_log, "create", "configmaps", AUDIT_CONTROL),
            10,
            f"the audit log ({self.audit_log}) to record the control write",
        )

    def _operator_identity(self) -> None:
        """The operator's ServiceAccount, bound by the repo's RBAC, as a kubeconfig."""
        if RBAC_MANIFEST.exists():
            self.kubectl("apply", "-f", str(RBAC_MANIFEST))
        else:
            self.kubectl("create", "namespace", OPERATOR_NAMESPACE)
            self.kubectl("create", "serviceaccount", OPERATOR_SA, "-n", OPERATOR_NAMESPACE)
        token = self.kubectl(
            "create", "token", OPERATOR_SA, "-n", OPERATOR_NAMESPACE, "--duration=48h"
        ).strip()
        write_kubeconfig(
            self.operator_kubeconfig,
            self.server,
            self.workdir / "pki" / "ca.crt",
            OPERATOR_SA,
            token=token,
        )

    def _nodes_ready(self) -> bool:
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        ready = [
            n
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        ]
        return len(ready) >= self.nodes


def fake_gpu_nodes(count: int) -> list[dict[str, object]]:
    """Node objects shaped like 8×H100 servers with a local NVMe drive, for kwok."""
    resources = {
        "cpu": "224",
        "memory": "2Ti",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "ephemeral-storage": "3500Gi",
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE_NAME.format(i),
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": NODE_NAME.format(i),
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    "nvidia.com/gpu.product": GPU_PRODUCT,
                    "nvidia.com/gpu.count": "8",
                    NVME_LABEL: "true",
                },
            },
            "status": {"capacity": resources, "allocatable": resources},
        }
        for i in range(count)
    ]


def wait_manager_ready(
    proc: subprocess.Popen[bytes],
    what: str,
    health_port: int,
    webhook_port: int,
    log_tail: Callable[[], str],
    timeout: float = 60,
) -> None:
    """Wait until a controller-runtime manager started as `proc` is ready and its webhook
    server accepts connections. Its /readyz answers as soon as the probe server is up,
    before the webhook server listens (no readiness check covers it), and an object applied
    in that gap fails with "connection refused" from the webhook call."""
    deadline = time.monotonic() + timeout
    ready = False
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} exited: {log_tail()}")
        ready = ready or _http_ok(f"http://127.0.0.1:{health_port}/readyz")
        if ready:
            with suppress(OSError), socket.create_connection(("127.0.0.1", webhook_port), 1):
                return
        time.sleep(0.3)
    state = "its webhook server not listening" if ready else "not ready"
    raise ClusterError(f"{what} {state} in {timeout:.0f}s: {log_tail()}")


def _http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


def _succeeds(fn: Callable[[], object]) -> bool:
    try:
        fn()
    except ClusterError:
        return False
    return True


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _reap(pid: int, block: bool = False) -> bool:
    """Collect a child that has exited so it does not linger as a zombie (and its CPU counts
    as this process's children's). `block` once it shows as one: a process of many threads
    (every Go binary) shows its leader as a zombie while its other threads still exit, and
    until they have, a non-blocking wait finds nothing to collect. A process this one did
    not start is not its to collect."""
    with suppress(ChildProcessError):
        os.waitpid(pid, 0 if block else os.WNOHANG)
    return False


@functools.cache
def apiserver_version(binary: str) -> str:
    """`kube-apiserver --version`: "Kubernetes v1.36.3"."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def capture_upstream_crds(variant: str = "full") -> Path:
    """Capture the stored form of `variant`'s upstream CRDs for this machine's API server,
    unless it is cached (stored_crds.py); return the capture's file. `make test` runs it
    among its builds, so no test waits on it."""
    directory = upstream_crds(variant)
    version = apiserver_version(str(build_binaries() / "kube-apiserver"))
    fd = stored_crds.lock(directory)  # test workers or two checkouts may ask at once
    try:
        key = stored_crds.capture_key(stored_crds.crd_files(directory), version)
        if stored_crds.load(directory, version) is None:
            with running_cluster() as cluster:
                cluster.install_crds(directory)
                stored = stored_crds.read(cluster.etcd_url)
            unready = stored.not_established()
            if unready:
                raise ClusterError(f"captured CRDs not Established: {', '.join(unready)}")
            stored_crds.save(directory, version, stored)
        return stored_crds.cache_file(directory, key)
    finally:
        os.close(fd)


@contextmanager
def running_cluster(workdir: Path | None = None) -> Iterator[LocalCluster]:
    """Bring a cluster up for the duration of a block; always tear it down."""
    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix="kvtier-cluster-")) if workdir is None else workdir
    cluster = LocalCluster(root)
    try:
        yield cluster.up()
    finally:
        cluster.down()
        if own:
            shutil.rmtree(root, ignore_errors=True)


def default_workdir() -> Path:
    env = os.environ.get("KVTIER_CLUSTER_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"kvtier-cluster-{os.getuid()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localcluster", description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["build", "crds", "stored-crds", "up", "down", "env", "status"]
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="working directory (default: $KVTIER_CLUSTER_DIR)"
    )
    args = parser.parse_args(argv)
    cluster = LocalCluster(args.dir or default_workdir())
    try:
        if args.command == "build":
            print(build_binaries(helm=True))
        elif args.command == "crds":
            for variant in CRD_VARIANTS:
                print(upstream_crds(variant))
        elif args.command == "stored-crds":
            print(capture_upstream_crds("full"))
        elif args.command == "up":
            cluster.up()
            print(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product"), end="")
        elif args.command == "down":
            cluster.down()
            shutil.rmtree(cluster.workdir, ignore_errors=True)
        elif args.command == "env":
            print(f"export KUBECONFIG={cluster.admin_kubeconfig}")
            print(f"export KVTIER_OPERATOR_KUBECONFIG={cluster.operator_kubeconfig}")
        elif args.command == "status":
            return 0 if cluster.state_file.exists() and cluster.running() else 1
    except ClusterError as exc:
        print(f"localcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
