"""The `kvtier` command: a dispatcher over subcommands registered by their modules.

Each module in SUBCOMMAND_MODULES has `register(subparsers)`, which adds its subcommands and
sets `handler` (Namespace → exit code) on each. Only the module of the command being run is
imported; the others appear in `kvtier --help` by name and one-line help alone, so one
subcommand's dependencies never slow down another (bench/startup.py measures it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from kvtier import __version__

# Not typing.TYPE_CHECKING: `kvtier --help` starts without importing typing (mypy treats any
# name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

# module → its commands and their one-line help, in the order `kvtier --help` lists them.
SUBCOMMAND_MODULES: dict[str, dict[str, str]] = {
    "kvtier.cli_plan": {
        "plan": "size the KV-cache tiers for a model and workload",
        "models": "list the built-in model catalog",
    },
    "kvtier.cli_operator": {"operator": "run the kvtier operator"},
    "kvtier.cli_probe": {"probe": "measure a disk tier with fio at the model's block size"},
    "kvtier.cli_evict": {"evict": "keep a vLLM fs tier directory below its high watermark"},
    "kvtier.cli_simulate": {"simulate": "what-if simulation of the tiers under agentic load"},
}

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
USAGE_ERROR = 2
INTERNAL_ERROR = 1
INTERRUPTED = 130
BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a killed writer
TRACEBACK_ENV = "KVTIER_TRACEBACK"


class CliError(Exception):
    """A problem to report in one line, without a traceback."""

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, with the terminal width read by os, not shutil.

    argparse builds a formatter for every add_argument call, and the stock one imports shutil
    (with bz2, lzma and fnmatch) for the width: a tenth of `kvtier --help`'s start-up.
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        # As argparse does with shutil's width: 2 columns spare.
        if width is None:
            width = terminal_width() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def terminal_width() -> int:
    """$COLUMNS, else the width of the terminal on stdout, else 80 (shutil's rule)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad usage as one CliError line instead of usage + exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "kvtier plan" → "plan"
        raise CliError(f"{command}: {message}" if command else message)


def build_parser(command: str | None = None) -> ArgumentParser:
    """The parser; `command`'s module registers its full subcommands, the rest only a name.

    With no command every module registers in full (for tests and documentation).
    """
    parser = ArgumentParser(
        prog="kvtier", description="KV-cache offload tiers for vLLM / llm-d model servers."
    )
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module, commands in SUBCOMMAND_MODULES.items():
        if command is None or command in commands:
            importlib.import_module(module).register(subparsers)
        else:
            for name, summary in commands.items():
                subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The subcommand argv names ("" if none): the first argument that is not an option."""
    known = {name for commands in SUBCOMMAND_MODULES.values() for name in commands}
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
