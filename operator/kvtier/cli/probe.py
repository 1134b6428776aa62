"""`kvtier probe`: measure a disk tier with the study's fio pattern and print one JSON line.

Run by the probe Job (render/probe_job.py), whose termination message is that line; on failure
it is `{"error": ..., "exitCode": ...}` instead. Exit codes: 0 ok, 2 bad input, 3 fio or
environment failure, always with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from kvtier.cli.args import positive_int
from kvtier.cli.base import CliError
from kvtier.cli.commands import summary
from kvtier.probe import DirectionStats, FioResult, ProbeError, ProbeOptions, run_probe
from kvtier.probe.errors import BAD_INPUT, ENVIRONMENT_FAILURE
from kvtier.probe.fio_runner import DEFAULT_NUMJOBS, DEFAULT_RUNTIME_SECONDS, MAX_FILE_BYTES
from kvtier.sizing import (
    KV_DTYPES,
    SizingError,
    bytes_per_token,
    human_bytes,
    parse_size,
    resolve_geometry,
    resolve_kv_dtype,
)

if TYPE_CHECKING:
    from kvtier.cli.base import Subparsers

# The kubelet creates this file in every container; only then is it written by default.
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "probe",
        help=summary("probe"),
        description="Run fio's random 75/25 read/write at the KV block size (iodepth 1, "
        "O_DIRECT) in DIR and print p50/p99 completion latency, bandwidth and IOPS as one "
        "JSON line. Exit codes: 0 ok, 2 bad input, 3 fio or environment failure.",
    )
    p.add_argument("--dir", required=True, help="directory on the tier to probe")
    block = p.add_argument_group("block size: --block-bytes, or derived from a model")
    source = block.add_mutually_exclusive_group(required=True)
    source.add_argument("--block-bytes", metavar="SIZE", help="server-wide KV block, e.g. 5Mi")
    source.add_argument("--model", help="catalog name or Hugging Face id (see `kvtier models`)")
    block.add_argument(
        "--tp", type=positive_int, default=1, help="tensor parallel size (default 1)"
    )
    block.add_argument("--kv-dtype", default="auto", help=f"{'|'.join(KV_DTYPES)} (default auto)")
    block.add_argument("--block-tokens", type=positive_int, default=16, help="(default 16)")
    p.add_argument(
        "--runtime",
        type=positive_int,
        default=DEFAULT_RUNTIME_SECONDS,
        metavar="SECONDS",
        help=f"timed run, after fio lays out its files (default {DEFAULT_RUNTIME_SECONDS})",
    )
    p.add_argument("--numjobs", type=positive_int, default=DEFAULT_NUMJOBS, help="(default 16)")
    p.add_argument(
        "--size",
        metavar="SIZE",
        help="file size per job (default: half the free space over numjobs, at most "
        f"{human_bytes(MAX_FILE_BYTES)})",
    )
    p.add_argument(
        "--allow-buffered",
        action="store_true",
        help="if the file system refuses O_DIRECT (or is tmpfs), probe with buffered I/O "
        "and mark the result buffered",
    )
    p.add_argument(
        "--termination-log",
        metavar="PATH",
        help=f"also write the result there (default {DEFAULT_TERMINATION_LOG} if it exists)",
    )
    p.add_argument("-o", "--output", choices=("json", "text"), default="json")
    p.set_defaults(handler=run_probe_command)


def run_probe_command(args: argparse.Namespace) -> int:
    log = args.termination_log or _default_termination_log()
    if args.termination_log:  # before a minute of fio, not after it
        _check_writable(args.termination_log)
    try:
        options = ProbeOptions(
            directory=args.dir,
            block_bytes=_block_bytes(args),
            runtime_seconds=args.runtime,
            numjobs=args.numjobs,
            size_bytes=parse_size(args.size, "--size") if args.size else None,
            allow_buffered=args.allow_buffered,
        )
        result = run_probe(options)
    except (ProbeError, SizingError, OSError) as exc:
        code = exc.exit_code if isinstance(exc, ProbeError) else BAD_INPUT
        if isinstance(exc, OSError):
            code, message = ENVIRONMENT_FAILURE, f"{exc.filename or args.dir}: {exc.strerror}"
        else:
            message = str(exc)
        if log:  # best effort: the operator then reads why instead of a log tail
            _write(log, json.dumps({"error": message, "exitCode": code}), fail=False)
        raise CliError(f"probe: {message}", code) from None
    text = result.to_json()
    print(text if args.output == "json" else describe(result))
    if log:
        _write(log, text, fail=True)
    return 0


def describe(result: FioResult) -> str:
    """One line for a person."""
    block = f"{result.block_bytes:,} B blocks" if result.block_bytes else "blocks"
    return (
        f"{_direction('read', result.read)}; {_direction('write', result.write)} "
        f"({block} × {result.numjobs} jobs, {result.runtime_seconds:g} s"
        f"{', buffered I/O' if result.buffered else ''})"
    )


def _direction(name: str, stats: DirectionStats | None) -> str:
    if stats is None:
        return f"{name}: none"
    return (
        f"{name} p50 {stats.p50_seconds * 1000:.3g} ms p99 {stats.p99_seconds * 1000:.3g} ms, "
        f"{stats.bandwidth_bytes_per_second / 1e6:.4g} MB/s, {stats.iops:g} IOPS"
    )


def _block_bytes(args: argparse.Namespace) -> int:
    if args.block_bytes is not None:
        return parse_size(args.block_bytes, "--block-bytes")
    geometry = resolve_geometry(model=args.model)
    dtype_bytes = resolve_kv_dtype(args.kv_dtype, geometry.model_dtype)[1]
    block_tokens: int = args.block_tokens
    return block_tokens * bytes_per_token(geometry, args.tp, dtype_bytes)


def _default_termination_log() -> str | None:
    path = DEFAULT_TERMINATION_LOG
    return path if os.path.isfile(path) and os.access(path, os.W_OK) else None


def _write(path: str, text: str, *, fail: bool) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        if fail:
            raise CliError(
                f"probe: cannot write the termination log {path}: {exc.strerror}",
                ENVIRONMENT_FAILURE,
            ) from None


def _check_writable(path: str) -> None:
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise CliError(
            f"probe: --termination-log: cannot write {path}: {exc.strerror or exc}", BAD_INPUT
        ) from None
