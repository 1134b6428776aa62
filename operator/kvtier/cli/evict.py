"""`kvtier evict`: keep a vLLM fs tier directory below its high watermark.

One pass with --once (its summary on stdout, text or JSON), else a pass every --interval
seconds until SIGTERM, one line per pass. Exit codes: 0 ok (also when another evictor holds
the directory's lock and this one stands by), 2 bad input (flags, a directory it may not
touch), 3 a file-system failure during a --once pass; always one line on stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING

from kvtier.cli.args import fraction, port, positive_seconds, seconds
from kvtier.cli.base import CliError
from kvtier.cli.commands import summary
from kvtier.evict import (
    DEFAULT_INTERVAL_SECONDS,
    EvictError,
    EvictorLock,
    Options,
    PassResult,
    Watermarks,
    open_tier_dir,
    run_loop,
    run_pass,
)
from kvtier.evict.errors import BAD_INPUT, ENVIRONMENT_FAILURE
from kvtier.evict.policy import DEFAULT_HIGH, DEFAULT_LOW, DEFAULT_PROTECT_SECONDS
from kvtier.sizing.errors import SizingError
from kvtier.sizing.units import parse_size

if TYPE_CHECKING:
    from kvtier.cli.base import Subparsers
    from kvtier.evict.metrics import EvictMetrics


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "evict",
        help=summary("evict"),
        description="Delete the least recently used vLLM block files in DIR once the volume "
        "or --capacity is HIGH full, down to LOW; never a file used in the last "
        "--protect-seconds, never anything outside DIR, one evictor per DIR. Exit codes: 0 ok "
        "(or standing by), 2 bad input, 3 file-system failure.",
    )
    p.add_argument("--dir", required=True, help="the tier directory (vLLM's fs root_dir)")
    p.add_argument(
        "--capacity",
        metavar="SIZE",
        help="the tier's capacity, e.g. 3Ti; the watermarks apply to it and to the volume's "
        "own size, whichever is fuller",
    )
    p.add_argument(
        "--high", type=fraction, default=DEFAULT_HIGH, help=f"(default {DEFAULT_HIGH:g})"
    )
    p.add_argument("--low", type=fraction, default=DEFAULT_LOW, help=f"(default {DEFAULT_LOW:g})")
    p.add_argument(
        "--protect-seconds",
        type=seconds,
        default=DEFAULT_PROTECT_SECONDS,
        metavar="N",
        help=f"never delete a file read or written in the last N s "
        f"(default {DEFAULT_PROTECT_SECONDS})",
    )
    when = p.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one pass, then exit")
    when.add_argument(
        "--interval",
        type=positive_seconds,
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="SECONDS",
        help=f"between passes (default {DEFAULT_INTERVAL_SECONDS:g})",
    )
    p.add_argument(
        "--allowed-root",
        action="append",
        default=[],
        metavar="DIR",
        help="refuse a --dir outside DIR (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="choose, but delete nothing")
    p.add_argument("--metrics-port", type=port, metavar="PORT", help="serve Prometheus metrics")
    p.add_argument("--metrics-address", default="0.0.0.0", metavar="ADDR", help="(default all)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run_evict_command)


def run_evict_command(args: argparse.Namespace) -> int:
    options = _options(args)
    if args.once and args.metrics_port is not None:
        raise CliError("evict: --metrics-port: serves the loop; leave out --once")
    try:
        tier = open_tier_dir(args.dir, args.allowed_root)
    except EvictError as exc:
        raise CliError(f"evict: {exc}", exc.exit_code) from None
    lock = EvictorLock(tier)
    try:
        if args.once:
            try:
                result = run_pass(tier, lock, options)
            except (OSError, EvictError) as exc:
                raise CliError(f"evict: {_why(tier.path, exc)}", ENVIRONMENT_FAILURE) from None
            _print(result, args.output)
            return 0
        metrics = _metrics(args)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())

        def on_pass(result: PassResult) -> None:
            if metrics is not None:
                metrics.observe(result)
            _print(result, args.output)

        def on_error(message: str) -> None:
            if metrics is not None:
                metrics.error()
            print(f"kvtier: evict: {message}", file=sys.stderr, flush=True)

        run_loop(tier, lock, options, args.interval, stop, on_pass, on_error)
        return 0
    finally:
        lock.release()
        tier.close()


def _options(args: argparse.Namespace) -> Options:
    try:
        marks = Watermarks(high=args.high, low=args.low)
        capacity = parse_size(args.capacity, "--capacity") if args.capacity else None
    except (ValueError, SizingError) as exc:
        raise CliError(f"evict: {exc}", BAD_INPUT) from None
    return Options(
        watermarks=marks,
        protect_seconds=args.protect_seconds,
        capacity_bytes=capacity,
        dry_run=args.dry_run,
    )


def _metrics(args: argparse.Namespace) -> EvictMetrics | None:
    if args.metrics_port is None:
        return None
    from kvtier.evict.metrics import EvictMetrics  # prometheus_client only when serving

    metrics = EvictMetrics()
    try:
        metrics.serve(args.metrics_port, args.metrics_address)
    except OSError as exc:
        raise CliError(
            f"evict: --metrics-port {args.metrics_port}: {exc.strerror or exc}",
            ENVIRONMENT_FAILURE,
        ) from None
    return metrics


def _print(result: PassResult, output: str) -> None:
    print(result.to_json() if output == "json" else result.describe(), flush=True)


def _why(path: str, exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"{exc.filename or path}: {exc.strerror or exc}"
    return str(exc)
