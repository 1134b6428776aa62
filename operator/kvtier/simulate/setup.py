"""From a SimConfig to the numbers the event model runs on, with kvtier's sizing engine.

Bytes per token, block bytes, the CPU tier (`cpu_bytes_to_use`, auto or given) and the disk
tier's default capacity all come from `kvtier.sizing.plan`, exactly as `kvtier plan` and the
operator compute them; this module adds only the compute model of the GPUs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvtier.simulate.config import SimConfig, Workload
from kvtier.simulate.workload import SharedPrefix, Trace
from kvtier.sizing import SizingError, SizingInput, SizingPlan, plan, resolve_geometry

GQA_GROUP = 8  # query heads per KV head when the caller does not say (Llama 3 70B/405B)


@dataclass(frozen=True)
class Derived:
    """The event model's inputs; tokens are whole offload blocks where they are capacities."""

    sizing: SizingPlan
    bytes_per_token: int  # server-wide, as stored: sliding-window layers keep their window
    block_tokens: int
    gpu_kv_tokens: int  # per replica
    cpu_tokens: int  # per replica
    disk_tokens: int  # per replica (NVMe) or shared by all (CephFS, ObjectStore)
    prefill_seconds_per_token: float  # linear layers, at zero context
    attention_seconds_per_token_pair: float  # each new token × each token it attends to
    decode_step_seconds: float  # weight reads of one decode step (dense: all weights)
    expert_read_seconds: float  # of which a mixture of experts' routed experts, all read
    expert_share: float  # experts one token routes to ÷ experts (0: dense)
    kv_read_seconds_per_token: float  # reading one token's KV in a decode step
    host_link_bytes_per_second: float  # all GPUs of a replica
    # Sliding-window layers under vLLM's hybrid KV cache: the window's pages at a prefix's
    # end, in tokens of whole blocks, without which the prefix is no GPU hit (0: no such layers).
    window_tokens: int = 0
    # Bytes of the GPU's KV cache left for blocks (all GPUs), and the disk tier's bytes.
    kv_cache_bytes: float = 0.0
    disk_bytes: int | None = None
    gpu_blocks: int = 0  # vLLM's num_gpu_blocks: what llm-d's autotuned router index holds

    def without_hybrid(self) -> Derived:
        """The same server when a KV connector turns vLLM's hybrid KV cache manager off (as
        vLLM did for any --kv-transfer-config before its OffloadingConnector supported the
        manager): sliding-window layers keep every token's KV like full attention, so a
        token takes the naive per-token bytes in HBM and in the tiers, and a prefix needs no
        window page to be found. Compute and decode reads are unchanged (the kernels still
        attend to the window only)."""
        if not self.window_tokens:
            return self
        naive = self.sizing.sizing.bytes_per_token
        block = self.block_tokens
        return dataclasses.replace(
            self,
            bytes_per_token=naive,
            gpu_kv_tokens=_whole_blocks(self.kv_cache_bytes / naive, block),
            cpu_tokens=_whole_blocks(self.sizing.sizing.cpu_bytes_to_use / naive, block),
            disk_tokens=0
            if self.disk_bytes is None
            else _whole_blocks(self.disk_bytes / naive, block),
            window_tokens=0,
            gpu_blocks=int(self.kv_cache_bytes // (naive * block)),
        )

    def weight_read_seconds(self, tokens: int) -> float:
        """HBM time to read the weights a step of `tokens` tokens needs: a mixture of experts
        reads only the experts its tokens route to (each token picks its own, uniformly)."""
        if not self.expert_share:
            return self.decode_step_seconds
        touched = 1 - (1 - self.expert_share) ** tokens
        return self.decode_step_seconds - self.expert_read_seconds * (1 - touched)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "bytesPerToken": self.bytes_per_token,
            "blockBytes": self.sizing.sizing.block_bytes,
            "gpuKVCacheTokens": self.gpu_kv_tokens,
            "cpuTierTokens": self.cpu_tokens,
            "cpuBytesToUse": self.sizing.sizing.cpu_bytes_to_use,
            "diskTierTokens": self.disk_tokens,
            "prefillTokensPerSecond": round(1 / self.prefill_seconds_per_token, 1),
            "decodeTokensPerSecond": round(1 / self.weight_read_seconds(1), 1),
        }


def derive(config: SimConfig) -> Derived:
    config.validate()
    geometry = resolve_geometry(config.model)
    w = config.workload
    output = _mean_output(w)
    longest = w.longest_prompt + output
    if geometry.max_position_embeddings and longest > geometry.max_position_embeddings:
        grows = (
            f"sessions grow to {1 + w.context_spread:g} × the average, "
            if isinstance(w, Workload)
            else "the longest prompt is "
        )
        raise SizingError(
            _CONTEXT_FIELD[type(w)],
            f"{grows}{longest:,} tokens with the output, above {config.model}'s maximum of "
            f"{geometry.max_position_embeddings:,} (max_position_embeddings)",
        )
    gpus = config.tensor_parallel_size
    gpu = config.gpu
    weights = config.weights_bytes or round(config.parameters * config.weight_bytes)
    context, sessions = _sizing_shape(w)
    sizing = plan(
        SizingInput(
            geometry=geometry,
            average_context_tokens=context,
            concurrent_sessions=sessions,
            replicas=config.replicas,
            tensor_parallel_size=gpus,
            kv_cache_dtype=config.kv_cache_dtype,
            block_tokens=config.block_tokens,
            cpu_bytes=config.cpu_bytes,
            node_memory_bytes=config.node_memory_bytes,
            disk_type=config.disk.kind if config.disk else "None",
            available_disk_types=frozenset({config.disk.kind}) if config.disk else frozenset(),
            gpu_memory_bytes=gpu.memory_bytes,
            gpu_memory_utilization=config.gpu_memory_utilization,
            model_weights_bytes=weights,
        )
    )
    # What a token's KV takes once sliding-window layers keep only their window: the sizing
    # engine's bytes of an average context, per token of it.
    per_token = max(1, -(-sizing.sizing.context_bytes // context))
    usable = gpus * (gpu.memory_bytes * config.gpu_memory_utilization - config.gpu_reserved_bytes)
    gpu_kv = _whole_blocks((usable - weights) / per_token, config.block_tokens)
    if gpu_kv < longest:
        raise SizingError(
            "parameters",
            f"{gpus} GPUs leave {max(gpu_kv, 0):,} tokens of KV cache after "
            f"{weights / 1e9:,.0f} GB of weights, less than the longest request's "
            f"{longest:,} (check --params, --weight-bytes, --weights and --tp)",
        )
    disk_bytes = None
    if config.disk is not None:
        disk_bytes = config.disk.capacity_bytes or sizing.sizing.disk_bytes
        if disk_bytes is None:  # an object store: a bucket is as large as the working set
            disk_bytes = sizing.sizing.working_set_bytes_all_replicas
    flops = gpus * gpu.peak_flops * gpu.prefill_flops_efficiency
    # A mixture of experts computes with its active parameters only.
    active = config.active_parameters or config.parameters
    query_width = (config.query_heads or GQA_GROUP * geometry.kv_heads) * geometry.head_dim
    # Causal attention: 2 matmuls (QKᵀ, PV) × 2 FLOPs per multiply-add, per layer; a sliding
    # layer attends to its window only, a constant per token.
    full_layers = geometry.attention_layers - geometry.sliding_layers
    window = (geometry.sliding_window or 0) * geometry.sliding_layers
    attention = 4 * full_layers * query_width / flops
    if config.prefill_tokens_per_second:
        prefill = 1 / config.prefill_tokens_per_second
        if config.prefill_reference_tokens:
            # Measured on one prompt from an empty cache: each token attended to half of it.
            prefill -= attention * config.prefill_reference_tokens / 2
            if prefill <= 0:
                raise SizingError(
                    "prefillTokensPerSecond",
                    f"{config.prefill_tokens_per_second:,.0f} tokens/s at "
                    f"{config.prefill_reference_tokens:,} tokens is faster than the attention "
                    "alone takes",
                )
    else:
        prefill = (2 * active + 4 * window * query_width) / flops
    hbm = gpus * gpu.hbm_bytes_per_second * gpu.hbm_efficiency
    decode = (
        1 / config.decode_tokens_per_second if config.decode_tokens_per_second else weights / hbm
    )
    expert_share = expert_read = 0.0
    if config.experts and config.active_parameters and not config.decode_tokens_per_second:
        # total = dense + experts; active = dense + experts × k/E: solve for the experts.
        expert_share = config.experts_per_token / config.experts
        routed = (config.parameters - config.active_parameters) / (1 - expert_share)
        expert_read = decode * min(1.0, routed / config.parameters)
    # A connector that stores every sliding-window block beside its full-attention one keeps
    # every layer's KV of a token in the tiers: the naive bytes per token.
    window_stored = bool(geometry.sliding_layers) and config.offload_every_block
    tier_per_token = sizing.sizing.bytes_per_token if window_stored else per_token
    return Derived(
        sizing=sizing,
        bytes_per_token=per_token,
        block_tokens=config.block_tokens,
        gpu_kv_tokens=gpu_kv,
        cpu_tokens=_whole_blocks(
            sizing.sizing.cpu_bytes_to_use / tier_per_token, config.block_tokens
        ),
        disk_tokens=0
        if disk_bytes is None
        else _whole_blocks(disk_bytes / tier_per_token, config.block_tokens),
        prefill_seconds_per_token=prefill,
        attention_seconds_per_token_pair=attention,
        decode_step_seconds=decode,
        expert_read_seconds=expert_read,
        expert_share=expert_share,
        kv_read_seconds_per_token=per_token / hbm,
        host_link_bytes_per_second=gpus * gpu.host_link_bytes_per_second,
        window_tokens=-(-geometry.sliding_window // config.block_tokens) * config.block_tokens
        if geometry.sliding_layers and geometry.sliding_window
        else 0,
        kv_cache_bytes=usable - weights,
        disk_bytes=disk_bytes,
        # A block holds one KV cache group's layers (with sliding-window layers, vLLM's
        # hybrid manager groups them as many as the full-attention ones): the sizing
        # engine's offload block.
        gpu_blocks=max(0, int((usable - weights) // sizing.sizing.block_bytes)),
    )


_CONTEXT_FIELD = {Workload: "averageContextTokens", SharedPrefix: "prefixTokens", Trace: "trace"}


def _mean_output(w: Workload | SharedPrefix | Trace) -> int:
    if isinstance(w, Trace):
        return max(r.output_tokens for r in w.requests)
    return w.output_tokens


def _sizing_shape(w: Workload | SharedPrefix | Trace) -> tuple[int, int]:
    """(average context, distinct contexts) for the sizing engine's working set."""
    if isinstance(w, Workload):
        return w.average_context_tokens, w.sessions
    if isinstance(w, SharedPrefix):
        return w.longest_prompt, w.groups
    prompts = [sum(n for _, n in r.segments) for r in w.requests]
    return max(1, sum(prompts) // len(prompts)), len({r.affinity for r in w.requests})


def _whole_blocks(tokens: float, block_tokens: int) -> int:
    return int(tokens) // block_tokens * block_tokens
