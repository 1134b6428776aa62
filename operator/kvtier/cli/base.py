"""What the dispatcher and every command share: CliError, the exit codes, the parser.

Imported by `kvtier --help`: argparse, os and sys only (not typing, not shutil).
"""

from __future__ import annotations

import argparse
import os
import sys

# Not typing.TYPE_CHECKING: `kvtier --help` starts without importing typing (mypy treats any
# name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

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
