"""Pure KV-cache sizing: model geometry, catalog, tier sizing, topology and vLLM config.

No Kubernetes API, no kopf, no I/O beyond reading a config.json the caller names.
Entry points: `resolve_geometry` (or `lookup_model` / `geometry_from_hf_config`), then
`plan(SizingInput(...))` → `SizingPlan` with `as_dict()` and `to_status()`.
"""

from kvtier.sizing.catalog import CatalogEntry, find_model, load_catalog, lookup_model
from kvtier.sizing.disk_types import DISK_TYPES
from kvtier.sizing.errors import SizingError
from kvtier.sizing.fio import fio_args, fio_block_size, fio_command
from kvtier.sizing.geometry import (
    KV_DTYPES,
    ModelGeometry,
    bytes_per_token,
    bytes_per_token_per_rank,
    kv_heads_per_rank,
    resolve_kv_dtype,
)
from kvtier.sizing.hfconfig import geometry_from_hf_config, load_hf_config
from kvtier.sizing.model import parse_geometry, resolve_geometry
from kvtier.sizing.plan import Sizing, SizingInput, SizingPlan, cpu_tier_cap, plan
from kvtier.sizing.tiers import (
    TierAssessment,
    assess_tier,
    crossover_tokens,
    normalize_disk_type,
    restore_seconds,
)
from kvtier.sizing.topology import TOPOLOGIES, TopologyDecision, choose_topology
from kvtier.sizing.units import human_bytes, parse_bandwidth, parse_count, parse_seconds, parse_size
from kvtier.sizing.vllm import ConnectorSettings, kv_transfer_config, kv_transfer_config_arg

__all__ = [
    "DISK_TYPES",
    "KV_DTYPES",
    "TOPOLOGIES",
    "CatalogEntry",
    "ConnectorSettings",
    "ModelGeometry",
    "Sizing",
    "SizingError",
    "SizingInput",
    "SizingPlan",
    "TierAssessment",
    "TopologyDecision",
    "assess_tier",
    "bytes_per_token",
    "bytes_per_token_per_rank",
    "choose_topology",
    "cpu_tier_cap",
    "crossover_tokens",
    "find_model",
    "fio_args",
    "fio_block_size",
    "fio_command",
    "geometry_from_hf_config",
    "human_bytes",
    "kv_heads_per_rank",
    "kv_transfer_config",
    "kv_transfer_config_arg",
    "load_catalog",
    "load_hf_config",
    "lookup_model",
    "normalize_disk_type",
    "parse_bandwidth",
    "parse_count",
    "parse_geometry",
    "parse_seconds",
    "parse_size",
    "plan",
    "resolve_geometry",
    "resolve_kv_dtype",
    "restore_seconds",
]
