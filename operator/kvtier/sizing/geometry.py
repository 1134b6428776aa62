"""Model KV geometry, KV-cache dtypes and the bytes-per-token formula.

Per GPU rank: 2 (K and V) × attention layers × KV heads per rank × head dim × bytes per element.
Multi-head latent attention (MLA) stores one latent per layer instead: no factor 2, and the
latent is not split across TP ranks (every rank holds all of it). The whole server holds
TP × the per-rank figure; vLLM's `cpu_bytes_to_use` counts that total.
"""

from __future__ import annotations

from kvtier.sizing.errors import SizingError
from kvtier.sizing.record import Record

# Bytes per element for each `--kv-cache-dtype` vLLM accepts that kvtier can size.
KV_DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
KV_DTYPES: tuple[str, ...] = ("auto", *KV_DTYPE_BYTES)

# What `--kv-cache-dtype auto` becomes for a model dtype: vLLM keeps 16-bit checkpoints as they
# are and serves float32 ones in 16 bits (so 2 bytes either way).
_AUTO_FROM_MODEL_DTYPE: dict[str, str] = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "float32": "bfloat16",
}


class ModelGeometry(Record):
    """What the KV cache of one model looks like, independent of how it is served.

    For MLA models `kv_heads` is 1 and `head_dim` is the latent width
    (kv_lora_rank + qk_rope_head_dim).
    """

    attention_layers: int
    kv_heads: int
    head_dim: int
    name: str = "custom"
    model_dtype: str = "bfloat16"
    latent_attention: bool = False
    total_layers: int | None = None  # for display: Nemotron has 64 attention layers of 162
    source: str = "explicit"  # catalog | config.json | explicit
    max_position_embeddings: int | None = None  # longest context, when catalog or config knows
    # Of attention_layers, how many attend over a sliding window of that many tokens.
    sliding_layers: int = 0
    sliding_window: int | None = None
    # Nemotron NAS blocks whose attention is a linear replacement (they hold no KV).
    linear_attention_blocks: int = 0

    def __post_init__(self) -> None:
        for field, value in (
            ("attentionLayers", self.attention_layers),
            ("kvHeads", self.kv_heads),
            ("headDim", self.head_dim),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SizingError(field, f"must be a whole number greater than zero, got {value!r}")
        if self.latent_attention and self.kv_heads != 1:
            raise SizingError("kvHeads", "a latent-attention (MLA) geometry has exactly one head")
        if not 0 <= self.sliding_layers <= self.attention_layers:
            raise SizingError(
                "slidingLayers",
                f"{self.sliding_layers} is not between 0 and the {self.attention_layers} "
                "attention layers",
            )
        if (self.sliding_layers > 0) != (self.sliding_window is not None):
            raise SizingError(
                "slidingWindow", "slidingLayers and slidingWindow go together: both or neither"
            )
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise SizingError(
                "slidingWindow", f"must be greater than zero, got {self.sliding_window}"
            )

    def with_overrides(self, attention_layers: int, kv_heads: int, head_dim: int) -> ModelGeometry:
        """Explicit geometry wins over catalog or config.json; the model's dtype is kept.

        The layer kinds (sliding window) go with the catalog's or config's layer count: an
        explicit geometry describes full-attention layers only.
        """
        return ModelGeometry(
            attention_layers=attention_layers,
            kv_heads=kv_heads,
            head_dim=head_dim,
            name=self.name,
            model_dtype=self.model_dtype,
            source="explicit",
            max_position_embeddings=self.max_position_embeddings,
        )


def resolve_kv_dtype(kv_cache_dtype: str, model_dtype: str) -> tuple[str, int]:
    """(dtype name, bytes per element) for a `--kv-cache-dtype` value, resolving ``auto``."""
    requested = kv_cache_dtype.strip().lower()
    if requested == "auto":
        resolved = _AUTO_FROM_MODEL_DTYPE.get(model_dtype.lower())
        if resolved is None:
            raise SizingError(
                "kvCacheDtype",
                f"auto cannot be resolved for model dtype {model_dtype!r}; "
                f"give one of {', '.join(KV_DTYPE_BYTES)}",
            )
        return resolved, KV_DTYPE_BYTES[resolved]
    if requested not in KV_DTYPE_BYTES:
        raise SizingError(
            "kvCacheDtype", f"unknown KV cache dtype {kv_cache_dtype!r}; use {'|'.join(KV_DTYPES)}"
        )
    return requested, KV_DTYPE_BYTES[requested]


def kv_heads_per_rank(geometry: ModelGeometry, tensor_parallel_size: int) -> int:
    """KV heads each TP rank holds; vLLM replicates heads when TP exceeds them.

    TP must divide the KV heads, or be a multiple of them (then every rank holds one head).
    """
    if tensor_parallel_size <= 0:
        raise SizingError(
            "tensorParallelSize", f"must be greater than zero, got {tensor_parallel_size}"
        )
    if geometry.latent_attention:
        return 1
    heads = geometry.kv_heads
    if heads % tensor_parallel_size == 0:
        return heads // tensor_parallel_size
    if tensor_parallel_size % heads == 0:
        return 1
    raise SizingError(
        "tensorParallelSize",
        f"TP {tensor_parallel_size} neither divides the {heads} KV heads nor is a multiple of them",
    )


def bytes_per_token_per_rank(
    geometry: ModelGeometry, tensor_parallel_size: int, dtype_bytes: int
) -> int:
    """KV bytes one token occupies on one GPU rank."""
    heads = kv_heads_per_rank(geometry, tensor_parallel_size)
    kv_factor = 1 if geometry.latent_attention else 2
    return kv_factor * geometry.attention_layers * heads * geometry.head_dim * dtype_bytes


def bytes_per_token(geometry: ModelGeometry, tensor_parallel_size: int, dtype_bytes: int) -> int:
    """KV bytes one token occupies over the whole server (all TP ranks)."""
    per_rank = bytes_per_token_per_rank(geometry, tensor_parallel_size, dtype_bytes)
    return per_rank * tensor_parallel_size
