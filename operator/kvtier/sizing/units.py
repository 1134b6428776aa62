"""Parsing of Kubernetes quantities, bandwidths and durations; human-readable byte counts."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity

from kvtier.sizing.errors import SizingError

_BANDWIDTH_SUFFIX = re.compile(r"^(?P<num>[0-9.eE+-]+)\s*(?P<unit>[kKMGTPE]i?)?B?(/s)?$")


def parse_size(value: str | int, field: str) -> int:
    """A positive whole number of bytes from a quantity (``64Gi``, ``64G``) or plain bytes."""
    return _positive_int(_quantity(value, field), field)


def parse_count(value: str | int, field: str) -> int:
    """A positive whole count such as tokens; quantities allowed (``128Ki`` = 131,072)."""
    return _positive_int(_quantity(value, field), field)


def parse_bandwidth(value: str | float, field: str) -> int:
    """Whole bytes per second from ``205MB/s``, ``1.5GiB/s``, ``205M`` or plain bytes/s."""
    if isinstance(value, int | float):
        number = Decimal(str(value))
    else:
        match = _BANDWIDTH_SUFFIX.match(value.strip())
        if match is None:
            raise SizingError(field, f"{value!r} is not a bandwidth such as 205MB/s or 1.5GiB/s")
        # Turn the storage spelling (MB, MiB) into a Kubernetes suffix (M, Mi) for the parser.
        unit = match["unit"] or ""
        unit = "k" if unit == "K" else unit
        number = _quantity(match["num"] + unit, field)
    if not number.is_finite() or number <= 0:
        raise SizingError(field, f"must be greater than zero, got {value!r}")
    return round(number)


def parse_seconds(value: str | float, field: str) -> float:
    """A positive duration in seconds."""
    try:
        seconds = float(value)
    except ValueError:
        raise SizingError(field, f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise SizingError(field, f"must be greater than zero seconds, got {value!r}")
    return seconds


def human_bytes(n: int | float) -> str:
    """``42949672960`` → ``40 GiB (42.9 GB)``: binary units first, decimal beside them."""
    if n < 1024:
        return f"{n:g} B"
    binary = _scale(n, 1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"])
    decimal = _scale(n, 1000, ["B", "kB", "MB", "GB", "TB", "PB"])
    return f"{binary} ({decimal})"


def _scale(n: float, base: int, units: list[str]) -> str:
    index = min(int(math.log(n, base)), len(units) - 1) if n > 0 else 0
    value = n / base**index
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{text} {units[index]}"


def _quantity(value: str | int, field: str) -> Decimal:
    try:
        number: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation, TypeError):
        raise SizingError(field, f"{value!r} is not a Kubernetes quantity such as 64Gi") from None
    return number


def _positive_int(number: Decimal, field: str) -> int:
    if number <= 0:
        raise SizingError(field, f"must be greater than zero, got {number}")
    if number != number.to_integral_value():
        raise SizingError(field, f"must be a whole number, got {number}")
    return int(number)
