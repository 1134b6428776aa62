"""`kvtier operator`: run the controller (kopf) with metrics and health endpoints."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import TYPE_CHECKING

from kvtier.cli import SUBCOMMAND_MODULES

if TYPE_CHECKING:
    from kvtier.cli import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "operator",
        help=SUBCOMMAND_MODULES[__name__]["operator"],
        description="Watch KVCacheTiers cluster-wide, size them, report status and metrics.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    p.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port")
    p.add_argument("--health-port", type=int, default=8081, help="liveness /healthz port")
    p.add_argument("--bind-address", default="0.0.0.0", help="address the endpoints listen on")
    p.add_argument("--workers", type=int, default=4, help="tiers reconciled concurrently")
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
    import kopf

    from kvtier import metrics
    from kvtier.handlers import registration

    if args.kubeconfig:
        os.environ[registration.ENV_KUBECONFIG] = args.kubeconfig
    os.environ[registration.ENV_WORKERS] = str(args.workers)
    os.environ[registration.ENV_NAMESPACE] = args.namespace
    os.environ[registration.ENV_LEADER_ELECT] = "1" if args.leader_elect else "0"
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger("kvtier").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    metrics.serve(args.metrics_port, args.bind_address)
    asyncio.run(
        kopf.operator(
            clusterwide=True,
            standalone=True,
            liveness_endpoint=f"http://{args.bind_address}:{args.health_port}/healthz",
        )
    )
    return 0


def _check_kubeconfig(path: str) -> None:
    """--kubeconfig names a readable YAML mapping with clusters, or CliError says why not."""
    import yaml

    from kvtier.cli import CliError
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
