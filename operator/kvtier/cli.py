"""The `kvtier` command: a dispatcher over subcommands registered by their modules.

Each module in SUBCOMMAND_MODULES has `register(subparsers)`, which adds its subcommands and
sets `handler` (Namespace → exit code) on each. Modules load lazily, so one subcommand's
dependencies never slow down another.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from kvtier import __version__
from kvtier.sizing import SizingError

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "kvtier.cli_plan",
    "kvtier.cli_operator",
    "kvtier.cli_probe",
)

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
USAGE_ERROR = 2


class CliError(Exception):
    """A problem to report in one line, without a traceback."""

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad usage as one CliError line instead of usage + exit."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "kvtier plan" → "plan"
        raise CliError(f"{command}: {message}" if command else message)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="kvtier", description="KV-cache offload tiers for vLLM / llm-d model servers."
    )
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not hasattr(args, "handler"):
            parser.print_help(sys.stderr)
            return USAGE_ERROR
        code: int = args.handler(args)
        return code
    except CliError as exc:
        print(f"kvtier: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SizingError as exc:
        print(f"kvtier: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
