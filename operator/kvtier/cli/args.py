"""Argument checks the commands share.

The argparse `type=` functions raise ArgumentTypeError, which the parser reports as
`kvtier: error: COMMAND: argument --FLAG: ...`; a command that checks a value after parsing
(simulate's numbers) wraps the same message in its own CliError. sizing_error turns the
sizing engine's SizingError into one line that names the flag the user typed.
"""

from __future__ import annotations

import argparse
import math
import re

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


# A size or count as people type it: 64Gi, 64GiB, 100GB, 64.38Gi, 1.5T, 50k, 4096.
_SCALED = re.compile(
    r"^(?P<num>[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[kKMGTPE]i?)?B?$"
)
_EXPONENTS = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def size_bytes(text: str | int, flag: str) -> int:
    """Whole bytes from 64Gi, 64GiB, 100GB, 64.38Gi or plain bytes (a fraction rounds).

    Kubernetes suffixes (Gi, G) and the storage spellings (GiB, GB) mean the same; raises the
    sizing engine's SizingError naming `flag`, as kvtier.sizing.parse_size does.
    """
    from kvtier.sizing.errors import SizingError

    value = _scaled(str(text))
    if value is None:
        raise SizingError(flag, f"{text!r} is not a size such as 64Gi, 64GiB or 100GB")
    if round(value) <= 0:
        raise SizingError(flag, f"must be greater than zero, got {text}")
    return round(value)


def count(text: str, flag: str, *, zero: bool = False) -> int:
    """A whole count (tokens) such as 50000, 50k or 128Ki; zero too with `zero`."""
    from kvtier.sizing.errors import SizingError

    value = _scaled(text)
    if value is None:
        raise SizingError(flag, f"{text!r} is not a token count such as 50000 or 128Ki")
    if value != int(value) or value < 0 or (value == 0 and not zero):
        rule = "a whole number, zero or more" if zero else "a whole number above zero"
        raise SizingError(flag, f"must be {rule}, got {text}")
    return int(value)


def number(text: str, flag: str, *, zero: bool = False) -> float:
    """A finite number above zero (or zero too, with `zero`); SizingError naming `flag`."""
    from kvtier.sizing.errors import SizingError

    try:
        value = float(text)
    except ValueError:
        raise SizingError(flag, f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise SizingError(flag, f"must be {'zero or more' if zero else 'above zero'}, got {text}")
    return value


def _scaled(text: str) -> float | None:
    """The number `text` spells with its unit applied, or None if it is not one."""
    match = _SCALED.match(text.strip())
    if match is None or (match["unit"] or "").startswith("ki"):
        return None
    unit = match["unit"] or ""
    base = 1024 if unit.endswith("i") else 1000
    value = float(match["num"]) * base ** _EXPONENTS.get(unit[:1], 0)
    return value if math.isfinite(value) else None


def accept_negative_values(parser: argparse.ArgumentParser) -> None:
    """Let a value such as `-1Gi` reach the flag's own check instead of argparse's "expected
    one argument": anything that starts like a number is a value (Python 3.13's rule)."""
    parser._negative_number_matcher = re.compile(r"^-\.?[0-9]")


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
