"""config.json → geometry, on real-shaped fixtures; what cannot be sized is refused."""

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.sizing import SizingError, bytes_per_token, geometry_from_hf_config, load_hf_config

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"


@pytest.mark.parametrize(
    ("fixture", "layers", "total", "heads", "head_dim", "per_token"),
    [
        ("llama-3.1-70b.json", 80, 80, 8, 128, 327_680),  # head_dim derived: 8192 / 64
        ("gpt-oss-120b.json", 36, 36, 8, 64, 73_728),  # sliding-window layers count
        ("nemotron-ultra-253b.json", 64, 162, 8, 128, 262_144),  # no-op / linear blocks don't
        ("qwen3-32b.json", 64, 64, 8, 128, 262_144),  # explicit head_dim, not 5120 / 64
        ("gemma-3-27b-it.json", 62, 62, 16, 128, 507_904),  # nested text_config
    ],
)
def test_fixture_geometry(
    fixture: str, layers: int, total: int, heads: int, head_dim: int, per_token: int
) -> None:
    g = geometry_from_hf_config(CONFIGS / fixture)
    assert (g.attention_layers, g.total_layers, g.kv_heads, g.head_dim) == (
        layers,
        total,
        heads,
        head_dim,
    )
    assert g.model_dtype == "bfloat16"
    assert g.source == "config.json"
    assert bytes_per_token(g, 1, 2) == per_token


def test_deepseek_v3_mla_latent() -> None:
    g = geometry_from_hf_config(CONFIGS / "deepseek-v3.json")
    assert g.latent_attention
    assert (g.attention_layers, g.kv_heads, g.head_dim) == (61, 1, 512 + 64)
    assert bytes_per_token(g, 1, 2) == 70_272


def test_accepts_a_parsed_dict_and_a_name() -> None:
    data = load_hf_config(CONFIGS / "qwen3-32b.json")
    g = geometry_from_hf_config(data, name="Qwen/Qwen3-32B")
    assert g.name == "Qwen/Qwen3-32B"
    assert g.head_dim == 128


def _llama(**changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    cfg.update(changes)
    return cfg


def test_missing_kv_heads_means_multi_head_attention() -> None:
    cfg = _llama()
    del cfg["num_key_value_heads"]
    assert geometry_from_hf_config(cfg).kv_heads == 64


def test_new_transformers_dtype_key_and_float32() -> None:
    cfg = _llama(dtype="float32")
    del cfg["torch_dtype"]
    assert geometry_from_hf_config(cfg).model_dtype == "float32"


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"layer_types": ["linear_attention", "full_attention"] * 40}, "linear_attention"),
        ({"layer_types": ["full_attention"] * 3}, "one entry per layer"),
        ({"hybrid_override_pattern": "M-M-M*-"}, "hybrid"),
        ({"attn_layer_period": 8}, "hybrid"),
        ({"is_encoder_decoder": True}, "encoder-decoder"),
        ({"num_key_value_heads": [8, 4]}, "differs per layer"),
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"num_hidden_layers": "80"}, "positive integer"),
        ({"hidden_size": 8190}, "not a multiple"),
        ({"model_type": "gemma3_text"}, "does not derive"),
        ({"kv_lora_rank": 512}, "qk_rope_head_dim"),
    ],
)
def test_unsizeable_configs_are_refused(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(SizingError, match=match) as err:
        geometry_from_hf_config(_llama(**changes))
    assert err.value.field == "config.json"


def test_nemotron_with_mixed_kv_heads_is_refused() -> None:
    cfg = json.loads((CONFIGS / "nemotron-ultra-253b.json").read_text())
    cfg["block_configs"][0]["attention"]["n_heads_in_group"] = 8
    with pytest.raises(SizingError, match="KV heads differ"):
        geometry_from_hf_config(cfg)


@pytest.mark.parametrize(("content", "match"), [("{not json", "not valid JSON"), ("[1]", "object")])
def test_malformed_file(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(SizingError, match=match):
        geometry_from_hf_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SizingError, match="cannot read"):
        load_hf_config(tmp_path / "absent.json")
