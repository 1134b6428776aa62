"""Parsing of Kubernetes quantities, bandwidths and durations; human-readable byte counts."""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException, InvalidOperation

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
        number = parse_quantity(value)
    except ValueError:
        raise SizingError(field, f"{value!r} is not a Kubernetes quantity such as 64Gi") from None
    return number


MAX_QUANTITY = 2**63 - 1  # resource.Quantity holds an int64 of its unit

# Decimal exponents of the suffixes, as in Kubernetes' resource.Quantity (apimachinery).
_EXPONENTS = {"n": -3, "u": -2, "m": -1, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_BINARY_PREFIXES = "KMGTPE"  # Ki … Ei in base 1024; "ki", "mi", "ni", "ui" do not exist


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """A Kubernetes quantity (``64Gi``, ``64G``, ``500m``, ``1e3``) → Decimal; ValueError if not.

    The same reading as ``kubernetes.utils.parse_quantity`` (the tests hold it to that), without
    importing the Kubernetes client: the sizing package stays pure and the CLI starts fast.
    """
    if isinstance(value, int | float | Decimal):
        return Decimal(value)
    text = str(value)
    number, suffix = text, ""
    if len(text) >= 2 and text[-1] == "i":
        if text[-2] in _EXPONENTS:
            number, suffix = text[:-2], text[-2:]
    elif text and text[-1] in _EXPONENTS:
        number, suffix = text[:-1], text[-1]
    try:
        mantissa = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"invalid number format: {number}") from None
    if not suffix:
        return mantissa
    if suffix.endswith("i"):
        if suffix[0] not in _BINARY_PREFIXES:
            raise ValueError(f"{text} has unknown suffix")
        base = 1024
    else:
        base = 1000
    try:
        return mantissa * (base ** Decimal(_EXPONENTS[suffix[0]]))
    except DecimalException as exc:
        raise ValueError(f"invalid quantity: {text}") from exc


def _positive_int(number: Decimal, field: str) -> int:
    if not number.is_finite():
        raise SizingError(field, f"must be a finite number, got {number}")
    if number <= 0:
        raise SizingError(field, f"must be greater than zero, got {number}")
    if number != number.to_integral_value():
        raise SizingError(field, f"must be a whole number, got {number}")
    if number > MAX_QUANTITY:
        raise SizingError(field, f"{number:.3g} is beyond a Kubernetes quantity (at most 2^63-1)")
    return int(number)
