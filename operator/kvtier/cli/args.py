"""Argument checks the commands share.

The argparse `type=` functions raise ArgumentTypeError, which the parser reports as
`kvtier: error: COMMAND: argument --FLAG: ...`; a command that checks a value after parsing
(simulate's numbers) wraps the same message in its own CliError. sizing_error turns the
sizing engine's SizingError into one line that names the flag the user typed.
"""

from __future__ import annotations

import argparse
import math

from kvtier.cli.base import USAGE_ERROR, CliError

# Not typing.TYPE_CHECKING (see base.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from kvtier.sizing.errors import SizingError


def positive_int(text: str) -> int:
    """A whole number greater than zero."""
    value = _int(text, "a whole number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than zero, got {value}")
    return value


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    value = _int(text, "a port number")
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"must be 1 to 65535, got {value}")
    return value


def positive_number(text: str, *, zero: bool = False) -> float:
    """A finite number greater than zero (or zero itself, with `zero`)."""
    value = _float(text, "a number")
    if not (value > 0 or (zero and value == 0)) or value == math.inf:
        raise argparse.ArgumentTypeError(f"must be greater than zero, got {text}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds, zero or more."""
    value = _float(text, "a number of seconds")
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be zero or more seconds, got {text}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds greater than zero."""
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than zero seconds, got {text}")
    return value


def fraction(text: str) -> float:
    """A fraction in (0, 1]: 0.85 or 85%."""
    percent = text.endswith("%")
    try:
        value = float(text[:-1] if percent else text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a fraction such as 0.85 or 85%"
        ) from None
    value = value / 100 if percent else value
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1] such as 0.85, got {text}")
    return value


def sizing_error(
    exc: SizingError,
    flags: Mapping[str, str],
    command: str | None = None,
    exit_code: int = USAGE_ERROR,
) -> CliError:
    """`[COMMAND: ]FLAG: message` for a SizingError; `flags` maps its field to the flag that
    set it (a field not in it is shown as it is)."""
    prefix = f"{command}: " if command else ""
    return CliError(f"{prefix}{flags.get(exc.field, exc.field)}: {exc.message}", exit_code)


def _int(text: str, noun: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None


def _float(text: str, noun: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
