"""Read a Hugging Face `config.json` into a ModelGeometry, or refuse it.

Anything this reader cannot size exactly (hybrid Mamba/linear-attention stacks, encoder-decoder
models, per-layer KV head counts) is refused with a SizingError: a wrong byte count would size
a CPU tier and a disk tier wrongly without anyone noticing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from kvtier.sizing.errors import SizingError
from kvtier.sizing.geometry import ModelGeometry
from kvtier.sizing.record import replace
from kvtier.textfile import TextFileError, read_text_file

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FIELD = "config.json"

# `layer_types` entries that hold a per-token KV cache (sliding-window layers do too).
_ATTENTION_LAYER_TYPES = frozenset(
    {"full_attention", "sliding_attention", "attention", "chunked_attention"}
)
# Keys that mark hybrid stacks whose non-attention layers keep state of another shape.
_HYBRID_KEYS = (
    "hybrid_override_pattern",
    "attn_layer_period",
    "layers_block_type",
    "ssm_cfg",
    "mamba_d_state",
    "mamba_d_ssm",
    "linear_attn_config",
)
# Model families whose configs may leave out layer_types: every Nth layer is global attention.
_GLOBAL_EVERY = {"gemma3": 6, "gemma2": 2}
# Model families whose head_dim default is not hidden_size / heads when the key is absent.
_HEAD_DIM_NOT_DERIVABLE = ("gemma",)


def load_hf_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a config.json file; every failure becomes a SizingError naming the file."""
    try:
        text = read_text_file(path)
    except TextFileError as exc:
        raise SizingError(FIELD, str(exc)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SizingError(FIELD, f"{os.fspath(path)} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SizingError(FIELD, f"{os.fspath(path)} must hold a JSON object")
    return data


def geometry_from_hf_config(
    config: Mapping[str, Any] | str | os.PathLike[str], name: str | None = None
) -> ModelGeometry:
    """The KV geometry of a model from its config.json (a parsed dict or a path)."""
    raw = config if isinstance(config, Mapping) else load_hf_config(config)
    text = raw.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, Mapping) else raw
    model_type = str(cfg.get("model_type") or raw.get("model_type") or "")
    label = name or str(raw.get("_name_or_path") or model_type or "config.json")
    # Newer transformers write `dtype`, older `torch_dtype`; no dtype at all means 16 bits.
    dtypes = (c.get(k) for c in (cfg, raw) for k in ("torch_dtype", "dtype"))
    dtype = str(next((d for d in dtypes if d), "bfloat16"))

    if cfg.get("is_encoder_decoder") or raw.get("is_encoder_decoder"):
        raise SizingError(FIELD, f"{label}: encoder-decoder models are not supported")
    hybrid = [key for key in _HYBRID_KEYS if cfg.get(key) is not None]
    if hybrid:
        raise SizingError(
            FIELD,
            f"{label}: hybrid Mamba/linear-attention model ({hybrid[0]}) cannot be sized; "
            "give the geometry of its attention layers explicitly",
        )

    heads = _int(cfg, label, "num_attention_heads", "n_head", "num_heads")
    if cfg.get("kv_lora_rank") is not None:
        return replace(
            _latent_geometry(cfg, label, dtype), max_position_embeddings=_max_position(cfg, raw)
        )

    sliding = linear = 0
    if isinstance(cfg.get("block_configs"), list):
        layers, kv_heads, total, linear = _nas_blocks(cfg["block_configs"], heads, label)
    else:
        total = _int(cfg, label, "num_hidden_layers", "n_layer", "num_layers")
        layers = total
        sliding = _sliding_layers(cfg, total, model_type, label)
        kv_heads = _kv_heads(cfg, heads, label)
    return ModelGeometry(
        attention_layers=layers,
        kv_heads=kv_heads,
        head_dim=_head_dim(cfg, heads, model_type, label),
        name=label,
        model_dtype=dtype,
        total_layers=total,
        source="config.json",
        max_position_embeddings=_max_position(cfg, raw),
        sliding_layers=sliding,
        sliding_window=_int(cfg, label, "sliding_window") if sliding else None,
        linear_attention_blocks=linear,
    )


def _max_position(cfg: Mapping[str, Any], raw: Mapping[str, Any]) -> int | None:
    """The model's longest context (max_position_embeddings, n_positions), if it says."""
    for source in (cfg, raw):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _latent_geometry(cfg: Mapping[str, Any], label: str, dtype: str) -> ModelGeometry:
    # MLA (DeepSeek-V2/V3, Kimi-K2): one latent of kv_lora_rank + qk_rope_head_dim per layer.
    layers = _int(cfg, label, "num_hidden_layers")
    latent = _int(cfg, label, "kv_lora_rank") + _int(cfg, label, "qk_rope_head_dim")
    return ModelGeometry(
        attention_layers=layers,
        kv_heads=1,
        head_dim=latent,
        name=label,
        model_dtype=dtype,
        latent_attention=True,
        total_layers=layers,
        source="config.json",
    )


def _nas_blocks(blocks: list[Any], heads: int, label: str) -> tuple[int, int, int, int]:
    """Nemotron NAS `block_configs`: attention that is a no-op or linear holds no KV.

    (attention layers, KV heads, blocks, blocks whose attention is replace_with_linear)
    """
    kv_heads: set[int] = set()
    layers = linear = 0
    for index, block in enumerate(blocks):
        attention = block.get("attention") if isinstance(block, Mapping) else None
        if not isinstance(attention, Mapping):
            raise SizingError(FIELD, f"{label}: block_configs[{index}] has no attention entry")
        if attention.get("replace_with_linear"):
            linear += 1
        if attention.get("no_op") or attention.get("replace_with_linear"):
            continue
        group = attention.get("n_heads_in_group")
        if not isinstance(group, int) or group <= 0 or heads % group:
            raise SizingError(
                FIELD, f"{label}: block_configs[{index}].attention.n_heads_in_group is {group!r}"
            )
        kv_heads.add(heads // group)
        layers += 1
    if not kv_heads:
        raise SizingError(FIELD, f"{label}: block_configs has no attention layer")
    if len(kv_heads) > 1:
        raise SizingError(
            FIELD, f"{label}: KV heads differ between layers ({sorted(kv_heads)}); cannot size"
        )
    return layers, kv_heads.pop(), len(blocks), linear


def _sliding_layers(cfg: Mapping[str, Any], total: int, model_type: str, label: str) -> int:
    """How many layers attend over a sliding window (they hold KV, but only the window's)."""
    types = cfg.get("layer_types")
    if types is None:
        if cfg.get("sliding_window") is None or cfg.get("use_sliding_window") is False:
            return 0
        family = next((f for f in _GLOBAL_EVERY if model_type.startswith(f)), None)
        if family is not None:
            # Gemma 2/3 configs without layer_types: every Nth layer is global, the rest slide.
            every = cfg.get("sliding_window_pattern", _GLOBAL_EVERY[family])
            if not isinstance(every, int) or isinstance(every, bool) or every <= 0:
                raise SizingError(FIELD, f"{label}: sliding_window_pattern is {every!r}")
            return total - total // every
        return 0
    if not isinstance(types, list) or len(types) != total:
        raise SizingError(
            FIELD, f"{label}: layer_types does not list one entry per layer ({total} layers)"
        )
    unknown = sorted({str(t) for t in types} - _ATTENTION_LAYER_TYPES)
    if unknown:
        raise SizingError(
            FIELD, f"{label}: layer type {unknown[0]!r} holds no per-token KV cache; cannot size"
        )
    sliding = sum(1 for t in types if t == "sliding_attention")
    if sliding and cfg.get("sliding_window") is None:
        raise SizingError(FIELD, f"{label}: layer_types has sliding layers but no sliding_window")
    return sliding


def _kv_heads(cfg: Mapping[str, Any], heads: int, label: str) -> int:
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"):
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, list):
            raise SizingError(FIELD, f"{label}: {key} differs per layer; cannot size")
        return _int(cfg, label, key)
    # HF convention: no KV head count means multi-head attention, unless flagged multi-query.
    return 1 if cfg.get("multi_query") else heads


def _head_dim(cfg: Mapping[str, Any], heads: int, model_type: str, label: str) -> int:
    for key in ("head_dim", "kv_channels"):
        if cfg.get(key) is not None:
            return _int(cfg, label, key)
    if model_type.startswith(_HEAD_DIM_NOT_DERIVABLE):
        raise SizingError(
            FIELD, f"{label}: no head_dim, and {model_type} does not derive it from hidden_size"
        )
    hidden = _int(cfg, label, "hidden_size", "n_embd", "d_model")
    if hidden % heads:
        raise SizingError(
            FIELD, f"{label}: no head_dim, and hidden_size {hidden} is not a multiple of {heads}"
        )
    return hidden // heads


# The largest layer count, head count or head dimension kvtier accepts (the CRD's bound for
# an explicit geometry is of the same order).
MAX_DIMENSION = 65536


def _int(cfg: Mapping[str, Any], label: str, *keys: str) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SizingError(FIELD, f"{label}: {key} must be a positive integer, got {value!r}")
        if value > MAX_DIMENSION:
            # No served model comes near; such a number is an error, and would overflow
            # every byte count derived from it.
            raise SizingError(FIELD, f"{label}: {key} is {value}, above {MAX_DIMENSION}")
        return value
    raise SizingError(FIELD, f"{label}: has no {keys[0]}")
