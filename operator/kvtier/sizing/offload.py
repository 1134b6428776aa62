"""How vLLM lays a model's KV cache out in its CPU tier: chunks, groups, windows.

vLLM stores the offloaded KV cache in chunks of `block_size` tokens (kvtier's offload block).
With the hybrid KV cache manager (on by default) a model with sliding-window layers is split
into groups of equal layer count (padded): one chunk holds one group's layers, and a
sliding-window group keeps only its window's chunks of each request. A chunk is rounded up to
the release's alignment; only whole chunks are stored. MLA at TP > 1 on one node with the mp
executor holds one replicated copy in the releases that deduplicate it. Checked against vLLM's
own classes by tests/unit/test_vllm_conformance.py.
"""

from __future__ import annotations

from kvtier.sizing.geometry import ModelGeometry, bytes_per_token_per_rank
from kvtier.sizing.record import Record
from kvtier.sizing.releases import VLLMRelease

# A type with fewer layers than the smallest type × this joins its size (vLLM's heuristic
# that avoids padding e.g. 12 sliding + 13 full to 24).
_GROUP_SIZE_SLACK = 1.5


class ChunkGroup(Record):
    """One KV cache group as the CPU tier stores it."""

    layers: int  # real layers; the chunk is sized for the padded group
    window_chunks: int | None  # a sliding-window group's chunks per request, else None


class OffloadLayout(Record):
    """The CPU tier's chunk geometry for one model served one way by one vLLM release."""

    tokens_per_chunk: int
    layers_per_chunk: int  # the padded group size
    groups: tuple[ChunkGroup, ...]
    raw_chunk_bytes: int  # all copies of one chunk, before alignment
    chunk_bytes: int  # what one chunk costs in the CPU tier (and one disk-tier block)
    alignment: int
    replicated: bool  # one copy for all TP ranks (MLA)
    copies: int  # copies of each layer's KV in a chunk: TP ranks, or 1 when replicated

    def chunks_for_context(self, tokens: int) -> int:
        """Chunks one request of `tokens` tokens stores (whole chunks only)."""
        whole = tokens // self.tokens_per_chunk
        return sum(
            whole if g.window_chunks is None else min(whole, g.window_chunks) for g in self.groups
        )

    def context_bytes(self, tokens: int) -> int:
        """CPU-tier bytes one request of `tokens` tokens occupies."""
        return self.chunks_for_context(tokens) * self.chunk_bytes

    def chunks_in(self, cpu_bytes: int) -> int:
        """Chunks vLLM creates for a cpu_bytes_to_use."""
        return cpu_bytes // self.chunk_bytes

    @property
    def hybrid(self) -> bool:
        return len(self.groups) > 1 or any(g.window_chunks is not None for g in self.groups)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _group_layers(by_type: list[int]) -> tuple[int, list[list[int]]]:
    """(group size, the real layer count of each group, per type), as vLLM groups them."""
    group_size = min(by_type)
    largest = max(by_type)
    if largest < group_size * _GROUP_SIZE_SLACK:
        group_size = largest
    groups = []
    for count in by_type:
        n = _cdiv(count, group_size)
        # vLLM deals the layers round-robin over the type's groups (layers[i::n]).
        groups.append([len(range(i, count, n)) for i in range(n)])
    return group_size, groups


def offload_layout(
    geometry: ModelGeometry,
    *,
    tensor_parallel_size: int,
    dtype_bytes: int,
    tokens_per_chunk: int,
    release: VLLMRelease,
    hybrid_kv_cache_manager: bool = True,
    tiering: bool = False,
    executor: str = "mp",
    pipeline_parallel_size: int = 1,
) -> OffloadLayout:
    """The CPU-tier layout vLLM builds (see the module header)."""
    tp = tensor_parallel_size
    per_layer = bytes_per_token_per_rank(geometry, tp, dtype_bytes) // geometry.attention_layers
    sliding = geometry.sliding_layers if geometry.sliding_window else 0
    full = geometry.attention_layers - sliding
    if hybrid_kv_cache_manager and sliding:
        window = _cdiv(geometry.sliding_window or 0, tokens_per_chunk)
        types = [(full, None), (sliding, window)] if full else [(sliding, window)]
        size, per_type = _group_layers([count for count, _ in types])
        groups = tuple(
            ChunkGroup(layers, w)
            for (_, w), layer_counts in zip(types, per_type, strict=True)
            for layers in layer_counts
        )
    else:
        size = geometry.attention_layers
        groups = (ChunkGroup(size, None),)
    replicated = (
        release.mla_replicated
        and geometry.latent_attention
        and tp > 1
        # vLLM's boundary for the shared layout: TP only (one node, no pipeline stages).
        and executor == "mp"
        and pipeline_parallel_size == 1
    )
    copies = 1 if replicated else tp
    raw = size * per_layer * tokens_per_chunk * copies
    alignment = release.tiering_alignment if tiering else release.cpu_only_alignment
    return OffloadLayout(
        tokens_per_chunk=tokens_per_chunk,
        layers_per_chunk=size,
        groups=groups,
        raw_chunk_bytes=raw,
        chunk_bytes=_cdiv(raw, alignment) * alignment,
        alignment=alignment,
        replicated=replicated,
        copies=copies,
    )
