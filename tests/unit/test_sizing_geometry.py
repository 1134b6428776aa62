"""Bytes per token, KV dtypes and TP rules, pinned to the study's figures."""

import pytest

from kvtier.sizing import (
    ModelGeometry,
    SizingError,
    bytes_per_token,
    bytes_per_token_per_rank,
    kv_heads_per_rank,
    lookup_model,
    resolve_kv_dtype,
)

LLAMA_70B = ModelGeometry(80, 8, 128)
NEMOTRON_ULTRA = ModelGeometry(64, 8, 128, total_layers=162)
GPT_OSS_120B = ModelGeometry(36, 8, 64)
DEEPSEEK_V3 = ModelGeometry(61, 1, 576, latent_attention=True)


def test_llama_70b_16bit_is_327680_bytes_per_token() -> None:
    assert bytes_per_token(LLAMA_70B, 1, 2) == 327_680
    assert bytes_per_token(LLAMA_70B, 8, 2) == 327_680  # TP divides heads: server total unchanged


def test_llama_70b_128k_context_is_40_gib() -> None:
    assert bytes_per_token(LLAMA_70B, 8, 2) * 131_072 == 40 * 2**30


def test_nemotron_ultra_tp8_is_32768_per_rank() -> None:
    assert bytes_per_token_per_rank(NEMOTRON_ULTRA, 8, 2) == 32_768
    assert bytes_per_token(NEMOTRON_ULTRA, 8, 2) == 262_144


def test_gpt_oss_120b_block() -> None:
    assert 16 * bytes_per_token(GPT_OSS_120B, 1, 2) == 1_179_648


def test_fp8_halves_the_cache() -> None:
    assert bytes_per_token(LLAMA_70B, 8, 1) == 327_680 // 2


def test_tp_beyond_heads_replicates_one_head_per_rank() -> None:
    assert kv_heads_per_rank(GPT_OSS_120B, 16) == 1
    # 16 ranks each hold one of 8 heads: the server holds every head twice.
    assert bytes_per_token(GPT_OSS_120B, 16, 2) == 2 * bytes_per_token(GPT_OSS_120B, 8, 2)


@pytest.mark.parametrize("tp", [3, 5, 6, 12, 0, -8])
def test_tp_that_fits_neither_way_is_refused(tp: int) -> None:
    with pytest.raises(SizingError) as err:
        kv_heads_per_rank(LLAMA_70B, tp)
    assert err.value.field == "tensorParallelSize"


def test_mla_is_one_latent_not_split_not_sharded() -> None:
    assert bytes_per_token_per_rank(DEEPSEEK_V3, 1, 2) == 61 * 576 * 2
    # Every rank holds the whole latent, and TP need not divide anything.
    assert bytes_per_token_per_rank(DEEPSEEK_V3, 8, 2) == 61 * 576 * 2
    assert bytes_per_token(DEEPSEEK_V3, 8, 2) == 8 * 61 * 576 * 2


@pytest.mark.parametrize(
    ("requested", "model_dtype", "expected"),
    [
        ("auto", "bfloat16", ("bfloat16", 2)),
        ("auto", "float16", ("float16", 2)),
        ("auto", "float32", ("bfloat16", 2)),
        ("AUTO", "bfloat16", ("bfloat16", 2)),
        ("fp8", "bfloat16", ("fp8", 1)),
        ("fp8_e5m2", "bfloat16", ("fp8_e5m2", 1)),
        ("float16", "bfloat16", ("float16", 2)),
    ],
)
def test_resolve_kv_dtype(requested: str, model_dtype: str, expected: tuple[str, int]) -> None:
    assert resolve_kv_dtype(requested, model_dtype) == expected


@pytest.mark.parametrize(("requested", "model_dtype"), [("int4", "bfloat16"), ("auto", "int8")])
def test_unknown_kv_dtype_is_refused(requested: str, model_dtype: str) -> None:
    with pytest.raises(SizingError) as err:
        resolve_kv_dtype(requested, model_dtype)
    assert err.value.field == "kvCacheDtype"


@pytest.mark.parametrize("bad", [(0, 8, 128), (80, -1, 128), (80, 8, 0)])
def test_geometry_must_be_positive(bad: tuple[int, int, int]) -> None:
    with pytest.raises(SizingError):
        ModelGeometry(*bad)


def test_overrides_keep_the_model_dtype_and_name() -> None:
    base = lookup_model("gpt-oss-120b")
    over = base.with_overrides(10, 2, 64)
    assert (over.attention_layers, over.kv_heads, over.head_dim) == (10, 2, 64)
    assert (over.name, over.model_dtype, over.source) == (base.name, base.model_dtype, "explicit")
