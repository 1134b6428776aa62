"""The built-in catalog of serving models (data in kvtier/catalog/models.json).

JSON rather than YAML so that `kvtier plan` starts without importing a YAML parser; its
"about" lines say what each figure counts.
"""

from __future__ import annotations

import json
import os
from functools import cache

from kvtier.sizing.errors import SizingError
from kvtier.sizing.geometry import ModelGeometry
from kvtier.sizing.record import Record

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The package's own file: no importlib.resources, whose zipfile support costs start-up time.
CATALOG_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "catalog", "models.json")


class CatalogEntry(Record):
    """One catalog model: its Hugging Face id, the names it answers to and its geometry."""

    id: str
    short: str
    aliases: tuple[str, ...]
    geometry: ModelGeometry

    def names(self) -> tuple[str, ...]:
        return (self.id, self.short, *self.aliases)


@cache
def load_catalog() -> tuple[CatalogEntry, ...]:
    """All catalog entries, in file order."""
    with open(CATALOG_PATH, encoding="utf-8") as source:
        document = json.load(source)
    return tuple(_entry(item) for item in document["models"])


@cache  # a catalog lookup per decide; the catalog is read once
def find_model(name: str) -> CatalogEntry:
    """The entry named by HF id, short name or alias (case-insensitive; org prefix optional)."""
    wanted = _normalize(name)
    for entry in load_catalog():
        if any(wanted in (_normalize(n), _normalize(n.rsplit("/", 1)[-1])) for n in entry.names()):
            return entry
    raise SizingError(
        "model", f"unknown model {name!r}; see `kvtier models`, or give a config.json or geometry"
    )


def lookup_model(name: str) -> ModelGeometry:
    """The geometry of a catalog model."""
    return find_model(name).geometry


def _normalize(name: str) -> str:
    return name.strip().lower()


def _entry(item: dict[str, Any]) -> CatalogEntry:
    layers = item["attentionLayers"]
    return CatalogEntry(
        id=item["id"],
        short=item["short"],
        aliases=tuple(item.get("aliases", ())),
        geometry=ModelGeometry(
            attention_layers=layers,
            kv_heads=item["kvHeads"],
            head_dim=item["headDim"],
            name=item["id"],
            model_dtype=item.get("dtype", "bfloat16"),
            latent_attention=item.get("latentAttention", False),
            total_layers=item.get("totalLayers", layers),
            source="catalog",
            max_position_embeddings=item.get("maxPositionEmbeddings"),
            sliding_layers=item.get("slidingLayers", 0),
            sliding_window=item.get("slidingWindow"),
            linear_attention_blocks=item.get("linearAttentionBlocks", 0),
        ),
    )
