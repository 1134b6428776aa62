"""Kubernetes quantities <-> bytes, exact both ways."""

from __future__ import annotations

import math
from decimal import Decimal

from kubernetes.utils import parse_quantity

_BINARY = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20))
GiB = 1 << 30


def to_quantity(n: int) -> str:
    """Bytes as the shortest exact quantity: 3298534883328 → "3Ti", 1000 → "1000"."""
    for suffix, unit in _BINARY:
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def quantity_to_bytes(value: object) -> int:
    """A quantity read from an object (str or number) as whole bytes, rounded up."""
    number: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    return math.ceil(number)


def round_up(n: int, unit: int = GiB) -> int:
    """n rounded up to whole units, for sizes people read (and CephFS quota granularity)."""
    return -(-n // unit) * unit


def short_quantity(n: int) -> str:
    """Bytes as a compact binary quantity for people: 547608330240 → 510Gi."""
    for unit, size in (("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20)):
        if n >= size:
            value = n / size
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    return str(n)
