"""The shape the API server stores a status in: what a decided status is compared in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def prune(value: Any) -> Any:
    """Drop None values recursively: the shape the API server stores."""
    if isinstance(value, Mapping):
        return {k: prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune(v) for v in value]
    return value
