"""`kvtier operator`: run the controller (kopf) with metrics and health endpoints."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from kvtier.cli.args import positive_seconds
from kvtier.cli.base import CliError
from kvtier.cli.commands import summary
from kvtier.controller.resync import ENV_RESYNC_SECONDS, RESYNC_SECONDS

if TYPE_CHECKING:
    from kvtier import metrics as metrics_types
    from kvtier.cli.base import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "operator",
        help=summary("operator"),
        description="Watch KVCacheTiers cluster-wide, size them, report status and metrics.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    p.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port")
    p.add_argument(
        "--metrics-cert-file",
        help="PEM serving certificate for HTTPS /metrics (OpenShift: from the service CA)",
    )
    p.add_argument("--metrics-key-file", help="PEM private key of --metrics-cert-file")
    p.add_argument(
        "--metrics-insecure",
        action="store_true",
        help="serve /metrics over plain HTTP to anyone, without TLS or token checks "
        "(local runs only)",
    )
    p.add_argument("--health-port", type=int, default=8081, help="liveness /healthz port")
    p.add_argument("--bind-address", default="0.0.0.0", help="address the endpoints listen on")
    p.add_argument("--workers", type=int, default=4, help="tiers reconciled concurrently")
    p.add_argument(
        "--resync-seconds",
        type=positive_seconds,  # also checks a default taken from the environment
        default=os.environ.get(ENV_RESYNC_SECONDS, str(RESYNC_SECONDS)),
        help="every tier is reconciled again this often, whatever the watches report "
        f"(default {RESYNC_SECONDS:.0f}, or {ENV_RESYNC_SECONDS})",
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("KVTIER_NAMESPACE", "kvtier-system"),
        help="the operator's namespace, where its leader-election Lease lives",
    )
    p.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="act without a Lease (one replica only)",
    )
    p.add_argument("--log-format", choices=["json", "plain"], default="json")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig:  # a bad file is a usage error now, not a retry every minute
        _check_kubeconfig(args.kubeconfig)
    tls = _metrics_tls(args)
    import kopf

    from kvtier import metrics
    from kvtier.controller import collector, registration

    if args.kubeconfig:
        os.environ[registration.ENV_KUBECONFIG] = args.kubeconfig
    os.environ[registration.ENV_WORKERS] = str(args.workers)
    os.environ[ENV_RESYNC_SECONDS] = str(args.resync_seconds)
    os.environ[registration.ENV_NAMESPACE] = args.namespace
    os.environ[registration.ENV_LEADER_ELECT] = "1" if args.leader_elect else "0"
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger("kvtier").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if tls is None:
        metrics.serve(args.metrics_port, args.bind_address)
    else:
        from kvtier.kube.rest import Kube, load_client
        from kvtier.metrics_auth import Authorizer, KubeReviewer

        reviewer = KubeReviewer(Kube(load_client(args.kubeconfig), timeout=10))
        metrics.serve(args.metrics_port, args.bind_address, tls, Authorizer(reviewer))
    collector.tune()
    asyncio.run(
        kopf.operator(
            clusterwide=True,
            standalone=True,
            liveness_endpoint=f"http://{args.bind_address}:{args.health_port}/healthz",
        )
    )
    return 0


def _metrics_tls(args: argparse.Namespace) -> metrics_types.TLSFiles | None:
    """The serving certificate for HTTPS /metrics, None with --metrics-insecure; CliError
    when neither is given or a file is missing or not PEM."""
    import ssl

    from kvtier.metrics import TLSFiles
    from kvtier.textfile import TextFileError, read_text_file

    cert, key = args.metrics_cert_file, args.metrics_key_file
    if args.metrics_insecure:
        if cert or key:
            raise CliError("operator: --metrics-insecure contradicts --metrics-cert-file/-key-file")
        return None
    if not (cert and key):
        raise CliError(
            "operator: /metrics needs --metrics-cert-file and --metrics-key-file (HTTPS, "
            "scrapers authorized by the API server), or --metrics-insecure for a local run"
        )
    files = TLSFiles(Path(cert), Path(key))
    for flag, path in (("--metrics-cert-file", files.cert), ("--metrics-key-file", files.key)):
        try:
            read_text_file(str(path))  # PEM is text: size, UTF-8, a file at all
        except TextFileError as exc:
            raise CliError(f"operator: {flag}: {exc}") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise CliError(
            f"operator: --metrics-cert-file {cert} / --metrics-key-file {key}: not a PEM "
            f"certificate and its key ({exc.strerror or exc})"
        ) from None
    return files


def _check_kubeconfig(path: str) -> None:
    """--kubeconfig names a readable YAML mapping with clusters, or CliError says why not."""
    import yaml

    from kvtier.textfile import TextFileError, read_text_file

    try:
        document = yaml.safe_load(read_text_file(path))
    except TextFileError as exc:
        raise CliError(f"operator: --kubeconfig: {exc}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CliError(f"operator: --kubeconfig: {path} is not YAML: {problem}") from None
    if not isinstance(document, dict) or not document.get("clusters"):
        raise CliError(f"operator: --kubeconfig: {path} is not a kubeconfig (no clusters)")
