"""The `kvtier` command: a dispatcher over the command modules listed in commands.MODULES.

Each command module has `register(subparsers)`, which adds its commands and sets `handler`
(Namespace → exit code) on each. Only the module of the command being run is imported; the
others appear in `kvtier --help` by name and one-line help alone, so one command's
dependencies never slow down another (bench/startup.py measures it). The command modules
import base, args, commands and plot, never this module.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from kvtier import __version__
from kvtier.cli.base import (
    BROKEN_PIPE,
    INTERNAL_ERROR,
    INTERRUPTED,
    TRACEBACK_ENV,
    USAGE_ERROR,
    ArgumentParser,
    CliError,
)
from kvtier.cli.commands import MODULES, names

__all__ = ["build_parser", "main"]


def build_parser(command: str | None = None) -> ArgumentParser:
    """The parser; `command`'s module registers its full subcommands, the rest only a name.

    With no command every module registers in full (for tests and documentation).
    """
    parser = ArgumentParser(
        prog="kvtier", description="KV-cache offload tiers for vLLM / llm-d model servers."
    )
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module, helps in MODULES.items():
        if command is None or command in helps:
            importlib.import_module(module).register(subparsers)
        else:
            for name, summary in helps.items():
                subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The subcommand argv names ("" if none): the first argument that is not an option."""
    known = names()
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in known else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(argv))
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
    except BrokenPipeError:  # `kvtier models | head -1`: the reader left, nothing to say
        _silence_stdout()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        print("kvtier: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:
        # A SizingError can only come from a module that imported kvtier.sizing.errors; asking
        # sys.modules keeps `kvtier --help` from loading the sizing package.
        errors = sys.modules.get("kvtier.sizing.errors")
        if errors is not None and isinstance(exc, errors.SizingError):
            print(f"kvtier: error: {exc}", file=sys.stderr)
            return USAGE_ERROR
        if os.environ.get(TRACEBACK_ENV):
            raise
        # A bug, not bad input: still one line, and the way to see the whole traceback.
        print(
            f"kvtier: internal error: {type(exc).__name__}: {exc} "
            f"(set {TRACEBACK_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return INTERNAL_ERROR
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
