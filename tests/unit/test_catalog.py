"""The built-in catalog: names, and the study's geometry table."""

from pathlib import Path

import pytest

from kvtier.sizing import (
    SizingError,
    bytes_per_token,
    find_model,
    geometry_from_hf_config,
    load_catalog,
    lookup_model,
)

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"


@pytest.mark.parametrize(
    ("name", "per_token", "block"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", 327_680, 5_242_880),
        ("openai/gpt-oss-120b", 73_728, 1_179_648),
        ("nvidia/Llama-3_1-Nemotron-Ultra-253B-v1", 262_144, 4_194_304),
        ("Qwen/Qwen3-32B", 262_144, 4_194_304),
    ],
)
def test_study_table(name: str, per_token: int, block: int) -> None:
    g = lookup_model(name)
    assert bytes_per_token(g, 1, 2) == per_token
    assert 16 * bytes_per_token(g, 1, 2) == block


@pytest.mark.parametrize(
    "name", ["llama-3.1-70b", "LLAMA-3.1-70B", "Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B"]
)
def test_lookup_by_short_name_alias_or_bare_id(name: str) -> None:
    assert find_model(name).id == "meta-llama/Llama-3.1-70B-Instruct"


def test_study_models_are_present() -> None:
    shorts = {e.short for e in load_catalog()}
    for short in (
        "llama-3.1-70b",
        "llama-3.1-8b",
        "gpt-oss-120b",
        "gpt-oss-20b",
        "nemotron-ultra-253b",
        "qwen3-32b",
        "qwen3-30b-a3b",
        "gemma-3-27b",
    ):
        assert short in shorts


def test_names_are_unique() -> None:
    names = [n.lower() for e in load_catalog() for n in e.names()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("fixture", "name"),
    [
        ("llama-3.1-70b.json", "llama-3.1-70b"),
        ("gpt-oss-120b.json", "gpt-oss-120b"),
        ("nemotron-ultra-253b.json", "nemotron-ultra-253b"),
        ("qwen3-32b.json", "qwen3-32b"),
        ("gemma-3-27b-it.json", "gemma-3-27b"),
        ("deepseek-v3.json", "deepseek-v3"),
    ],
)
def test_catalog_agrees_with_config_json(fixture: str, name: str) -> None:
    from_config = geometry_from_hf_config(CONFIGS / fixture)
    from_catalog = lookup_model(name)
    assert (from_catalog.attention_layers, from_catalog.kv_heads, from_catalog.head_dim) == (
        from_config.attention_layers,
        from_config.kv_heads,
        from_config.head_dim,
    )
    assert from_catalog.latent_attention == from_config.latent_attention


def test_unknown_model() -> None:
    with pytest.raises(SizingError, match="unknown model") as err:
        lookup_model("acme/llm-9000")
    assert err.value.field == "model"
