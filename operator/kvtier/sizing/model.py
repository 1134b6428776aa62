"""Resolve a model's geometry from a catalog name, a config.json and/or explicit overrides."""

from __future__ import annotations

import os
from collections.abc import Mapping

from kvtier.sizing.catalog import lookup_model
from kvtier.sizing.errors import SizingError
from kvtier.sizing.geometry import ModelGeometry
from kvtier.sizing.hfconfig import geometry_from_hf_config

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def resolve_geometry(
    model: str | None = None,
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    geometry: tuple[int, int, int] | None = None,
) -> ModelGeometry:
    """The geometry to size with: config.json wins over the catalog, explicit geometry over both.

    `geometry` is (attention layers, KV heads, head dim).
    """
    base: ModelGeometry | None = None
    if config is not None:
        base = geometry_from_hf_config(config, name=model)
    elif model:
        base = lookup_model(model)
    if geometry is None:
        if base is None:
            raise SizingError("model", "give a model name, a config.json or an explicit geometry")
        return base
    layers, heads, head_dim = geometry
    if base is None:
        return ModelGeometry(layers, heads, head_dim)
    return base.with_overrides(layers, heads, head_dim)


def parse_geometry(text: str) -> tuple[int, int, int]:
    """``80,8,128`` → (attention layers, KV heads, head dim)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SizingError(
            "geometry", f"{text!r} is not LAYERS,KV_HEADS,HEAD_DIM of positive integers"
        )
    return int(parts[0]), int(parts[1]), int(parts[2])
