"""From a SimConfig to the numbers the event model runs on, with kvtier's sizing engine.

Bytes per token, block bytes, the CPU tier (`cpu_bytes_to_use`, auto or given) and the disk
tier's default capacity all come from `kvtier.sizing.plan`, exactly as `kvtier plan` and the
operator compute them; this module adds only the compute model of the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.simulate.config import SimConfig
from kvtier.sizing import SizingError, SizingInput, SizingPlan, plan, resolve_geometry

GQA_GROUP = 8  # query heads per KV head when the caller does not say (Llama 3 70B/405B)


@dataclass(frozen=True)
class Derived:
    """The event model's inputs; tokens are whole offload blocks where they are capacities."""

    sizing: SizingPlan
    bytes_per_token: int  # server-wide
    block_tokens: int
    gpu_kv_tokens: int  # per replica
    cpu_tokens: int  # per replica
    disk_tokens: int  # per replica (NVMe) or shared by all (CephFS, ObjectStore)
    prefill_seconds_per_token: float  # linear layers, at zero context
    attention_seconds_per_token_pair: float  # each new token × each token it attends to
    decode_step_seconds: float  # weight reads of one decode step
    kv_read_seconds_per_token: float  # reading one token's KV in a decode step
    host_link_bytes_per_second: float  # all GPUs of a replica

    def as_dict(self) -> dict[str, float | int]:
        return {
            "bytesPerToken": self.bytes_per_token,
            "blockBytes": self.sizing.sizing.block_bytes,
            "gpuKVCacheTokens": self.gpu_kv_tokens,
            "cpuTierTokens": self.cpu_tokens,
            "cpuBytesToUse": self.sizing.sizing.cpu_bytes_to_use,
            "diskTierTokens": self.disk_tokens,
            "prefillTokensPerSecond": round(1 / self.prefill_seconds_per_token, 1),
            "decodeTokensPerSecond": round(1 / self.decode_step_seconds, 1),
        }


def derive(config: SimConfig) -> Derived:
    config.validate()
    geometry = resolve_geometry(config.model)
    w = config.workload
    longest = w.end_tokens + w.output_tokens
    if geometry.max_position_embeddings and longest > geometry.max_position_embeddings:
        raise SizingError(
            "averageContextTokens",
            f"sessions grow to {1 + w.context_spread:g} × the average, {longest:,} tokens with "
            f"the output, above {config.model}'s maximum of "
            f"{geometry.max_position_embeddings:,} (max_position_embeddings)",
        )
    gpus = config.tensor_parallel_size
    gpu = config.gpu
    weights = round(config.parameters * config.weight_bytes)
    sizing = plan(
        SizingInput(
            geometry=geometry,
            average_context_tokens=w.average_context_tokens,
            concurrent_sessions=w.sessions,
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
    per_token = sizing.sizing.bytes_per_token
    usable = gpus * (gpu.memory_bytes * config.gpu_memory_utilization - config.gpu_reserved_bytes)
    gpu_kv = _whole_blocks((usable - weights) / per_token, config.block_tokens)
    if gpu_kv < w.end_tokens + w.output_tokens:
        raise SizingError(
            "parameters",
            f"{gpus} GPUs leave {max(gpu_kv, 0):,} tokens of KV cache after "
            f"{weights / 1e9:,.0f} GB of weights, less than one {w.end_tokens:,}-token session "
            "(check --params, --weight-bytes and --tp)",
        )
    disk_bytes = None
    if config.disk is not None:
        disk_bytes = config.disk.capacity_bytes or sizing.sizing.disk_bytes
        if disk_bytes is None:  # an object store: a bucket is as large as the working set
            disk_bytes = sizing.sizing.working_set_bytes_all_replicas
    flops = gpus * gpu.peak_flops * gpu.prefill_flops_efficiency
    prefill = (
        1 / config.prefill_tokens_per_second
        if config.prefill_tokens_per_second
        else 2 * config.parameters / flops
    )
    query_width = (config.query_heads or GQA_GROUP * geometry.kv_heads) * geometry.head_dim
    # Causal attention: 2 matmuls (QKᵀ, PV) × 2 FLOPs per multiply-add, per layer.
    attention = 4 * geometry.attention_layers * query_width / flops
    hbm = gpus * gpu.hbm_bytes_per_second * gpu.hbm_efficiency
    decode = (
        1 / config.decode_tokens_per_second if config.decode_tokens_per_second else weights / hbm
    )
    return Derived(
        sizing=sizing,
        bytes_per_token=per_token,
        block_tokens=config.block_tokens,
        gpu_kv_tokens=gpu_kv,
        cpu_tokens=_whole_blocks(sizing.sizing.cpu_bytes_to_use / per_token, config.block_tokens),
        disk_tokens=0
        if disk_bytes is None
        else _whole_blocks(disk_bytes / per_token, config.block_tokens),
        prefill_seconds_per_token=prefill,
        attention_seconds_per_token_pair=attention,
        decode_step_seconds=decode,
        kv_read_seconds_per_token=per_token / hbm,
        host_link_bytes_per_second=gpus * gpu.host_link_bytes_per_second,
    )


def _whole_blocks(tokens: float, block_tokens: int) -> int:
    return int(tokens) // block_tokens * block_tokens
