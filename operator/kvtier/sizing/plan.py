"""The whole sizing computation: from model, serving and workload to tiers and vLLM config.

`plan(SizingInput(...))` is pure: no Kubernetes, no I/O. Every byte figure is an int; seconds
are floats. `SizingPlan.as_dict()` is what `kvtier plan -o json` prints and `to_status()` the
part the operator writes to KVCacheTier status, with the same camelCase names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType

from kvtier.sizing.disk_types import BY_NAME as DISK_BY_NAME
from kvtier.sizing.disk_types import DISK_TYPES, SHARED_DISK_TYPES
from kvtier.sizing.errors import SizingError
from kvtier.sizing.fio import fio_block_size, fio_command
from kvtier.sizing.geometry import (
    ModelGeometry,
    bytes_per_token_per_rank,
    kv_heads_per_rank,
    resolve_kv_dtype,
)
from kvtier.sizing.offload import OffloadLayout, offload_layout
from kvtier.sizing.record import Record
from kvtier.sizing.releases import DEFAULT_VLLM_VERSION, VLLMRelease, vllm_release
from kvtier.sizing.tiers import (
    TierAssessment,
    assess_tier,
    tier_share,
)
from kvtier.sizing.topology import choose_topology
from kvtier.sizing.units import human_bytes
from kvtier.sizing.vllm import ACCESS_KEY_ENV, SECRET_KEY_ENV, ConnectorSettings, ObjectStore

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

GiB = 1 << 30
EVICTION_POLICIES = ("lru", "arc")
DISK_CHOICES = ("Auto", "None", *DISK_TYPES)
# Measured in the study: RGW p99 reached 1.13 s at 5 MB blocks.
_OBJECT_STORE_WARNING = (
    "ObjectStore (RGW/S3) tier: competitive at p50, but its p99 reached 1.13 s at 5 MB blocks "
    "in the study, and that tail lands directly in TTFT; probe p99 before relying on it"
)


class SizingInput(Record):
    """Everything the sizing needs. Defaults are the documented policy defaults.

    The cluster policy (KVCachePolicy) overrides the tunables below the workload fields.
    """

    geometry: ModelGeometry
    average_context_tokens: int
    concurrent_sessions: int = 1  # over all replicas; each replica serves its share
    replicas: int = 1
    tensor_parallel_size: int = 1
    kv_cache_dtype: str = "auto"  # auto | bfloat16 | float16 | fp8 (fp8_e4m3, fp8_e5m2)
    block_tokens: int = 16  # offload block size; a multiple of the GPU block size
    gpu_block_tokens: int = 16  # vLLM --block-size
    # The serving vLLM: its release (releases.py) and the flags that change the CPU tier.
    vllm_version: str = DEFAULT_VLLM_VERSION
    hybrid_kv_cache_manager: bool = True  # off: --disable-hybrid-kv-cache-manager
    data_parallel_size: int = 1  # engines per model-server pod, each with its own CPU tier
    distributed_executor_backend: str = "mp"
    pipeline_parallel_size: int = 1  # stages: each holds its layers, the chunk is the same
    max_model_len: int | None = None  # --max-model-len
    cpu_bytes: int | None = None  # None = auto: the working set, capped by node memory
    # CPU tier cap: node allocatable memory × fraction ÷ model-server pods on the node.
    node_memory_bytes: int | None = None
    model_server_pods_per_node: int = 1
    max_node_memory_fraction: float = 0.5
    # Pod memory for the tier = overhead × tier + headroom: vLLM's pinned/shared buffers
    # reach ~1.9× the offload size under cgroup limits.
    memory_overhead_factor: float = 2.0
    headroom_bytes: int = 4 * GiB
    # Disk tiers.
    disk_type: str = "Auto"  # Auto | None | NVMe | CephFS | ObjectStore
    available_disk_types: frozenset[str] = frozenset({"NVMe", "CephFS"})
    eviction_policy: str = "lru"
    fs_root_dir: str = "/mnt/kv-cache"
    n_read_threads: int = 16
    n_write_threads: int = 16
    object_store_bucket: str | None = None
    object_store_endpoint: str | None = None  # https://host[:port]
    # Restore vs recompute: baseline TTFT at the average context with offload off, and the
    # fio p99 latency / bandwidth per disk type (keys from DISK_TYPES).
    baseline_ttft_seconds: float | None = None
    tier_p99_seconds: Mapping[str, float] = MappingProxyType({})
    tier_bandwidth_bytes_per_second: Mapping[str, float] = MappingProxyType({})
    # Prefill compute seconds per token when measured (vLLM's prefill time over the tokens it
    # computed); better than baseline TTFT ÷ context, which on a loaded server is queueing.
    prefill_seconds_per_token: float | None = None
    # GPU KV cache, for the "CPU tier only mirrors HBM" warning: given, or estimated as
    # GPUs × HBM × utilization − weights when HBM and weights are both known; else no check.
    gpu_kv_cache_bytes: int | None = None
    gpu_memory_bytes: int | None = None  # HBM per GPU
    gpu_count: int | None = None  # default: tensor_parallel_size
    gpu_memory_utilization: float = 0.9
    model_weights_bytes: int | None = None
    # fio probe.
    probe_jobs: int = 16
    probe_runtime_seconds: int = 60
    probe_file_bytes: int = GiB

    def __post_init__(self) -> None:
        positive_ints = {
            "averageContextTokens": self.average_context_tokens,
            "concurrentSessions": self.concurrent_sessions,
            "replicas": self.replicas,
            "tensorParallelSize": self.tensor_parallel_size,
            "blockSizeTokens": self.block_tokens,
            "gpuBlockSizeTokens": self.gpu_block_tokens,
            "dataParallelSize": self.data_parallel_size,
            "pipelineParallelSize": self.pipeline_parallel_size,
            "modelServerPodsPerNode": self.model_server_pods_per_node,
            "nReadThreads": self.n_read_threads,
            "nWriteThreads": self.n_write_threads,
            "probeJobs": self.probe_jobs,
            "probeRuntimeSeconds": self.probe_runtime_seconds,
            "probeFileBytes": self.probe_file_bytes,
        }
        optional_ints = {
            "cpu.size": self.cpu_bytes,
            "nodeMemoryBytes": self.node_memory_bytes,
            "gpuKVCacheBytes": self.gpu_kv_cache_bytes,
            "gpuMemoryBytes": self.gpu_memory_bytes,
            "gpuCount": self.gpu_count,
            "modelWeightsBytes": self.model_weights_bytes,
            "maxModelLen": self.max_model_len,
        }
        given = {k: v for k, v in optional_ints.items() if v is not None}
        for name, number in {**positive_ints, **given}.items():
            if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
                raise SizingError(name, f"must be a whole number greater than zero, got {number!r}")
        vllm_release(self.vllm_version)  # refuses a release kvtier has not checked
        if self.headroom_bytes < 0:
            raise SizingError("headroomBytes", f"must not be negative, got {self.headroom_bytes}")
        if self.block_tokens % self.gpu_block_tokens:
            raise SizingError(
                "blockSizeTokens",
                f"{self.block_tokens} is not a multiple of the GPU block size "
                f"{self.gpu_block_tokens}",
            )
        if not 0 < self.max_node_memory_fraction <= 1:
            raise SizingError("maxNodeMemoryFraction", "must be in (0, 1]")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise SizingError("gpuMemoryUtilization", "must be in (0, 1]")
        if self.memory_overhead_factor < 1:
            raise SizingError("memoryOverheadFactor", "must be at least 1")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise SizingError("evictionPolicy", f"use {'|'.join(EVICTION_POLICIES)}")
        if self.disk_type not in DISK_CHOICES:
            raise SizingError("disk.type", f"unknown disk type; use {'|'.join(DISK_CHOICES)}")
        for name, disks in (
            ("availableDiskTypes", set(self.available_disk_types)),
            ("tierP99Seconds", set(self.tier_p99_seconds)),
            ("tierBandwidth", set(self.tier_bandwidth_bytes_per_second)),
        ):
            unknown = sorted(disks - set(DISK_TYPES))
            if unknown:
                raise SizingError(
                    name, f"unknown disk type {unknown[0]!r}; use {'|'.join(DISK_TYPES)}"
                )
        for name, measured in (
            ("tierP99Seconds", self.tier_p99_seconds),
            ("tierBandwidth", self.tier_bandwidth_bytes_per_second),
        ):
            for disk, value in measured.items():
                if not value > 0:
                    raise SizingError(name, f"{disk} must be greater than zero, got {value}")
        if self.baseline_ttft_seconds is not None and not self.baseline_ttft_seconds > 0:
            raise SizingError("baselineTTFTSeconds", "must be greater than zero")
        if self.prefill_seconds_per_token is not None and not self.prefill_seconds_per_token > 0:
            raise SizingError("prefillSecondsPerToken", "must be greater than zero")


class Sizing(Record):
    """The `status.sizing` figures, plus what the pod needs for the CPU tier."""

    bytes_per_token: int
    bytes_per_token_per_rank: int
    block_bytes: int  # one CPU chunk (and one disk-tier block), as vLLM allocates it
    context_bytes: int  # what one average context occupies in the CPU tier
    cpu_chunks: int  # chunks vLLM creates for cpu_bytes_to_use
    working_set_bytes: int  # per engine: what one CPU tier must hold
    working_set_bytes_all_replicas: int
    cpu_bytes_to_use: int  # per server, over all its workers (vLLM's meaning)
    fits_in_cpu: bool
    contexts_in_cpu: float  # average contexts the CPU tier holds, 2 decimals
    topology: str
    pod_memory_bytes: int  # memory to add to the model-server container for the tier
    # /dev/shm (memory emptyDir) size: the tier's backing file + headroom; None where the
    # release keeps the tier in private memory.
    shm_bytes: int | None
    # The disk tier's capacity as the operator claims it by default (None: no disk tier, or
    # an object store): CephFS one volume for all replicas, NVMe per replica (see disk_bytes).
    disk_bytes: int | None = None

    def to_status(self) -> dict[str, Any]:
        return {
            "bytesPerToken": self.bytes_per_token,
            "bytesPerTokenPerRank": self.bytes_per_token_per_rank,
            "blockBytes": self.block_bytes,
            "workingSetBytes": self.working_set_bytes,
            "cpuBytesToUse": self.cpu_bytes_to_use,
            "fitsInCPU": self.fits_in_cpu,
            "contextsInCPU": self.contexts_in_cpu,
            "topology": self.topology,
            "contextBytes": self.context_bytes,
            "cpuChunks": self.cpu_chunks,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.to_status(),
            "workingSetBytesAllReplicas": self.working_set_bytes_all_replicas,
            "podMemoryBytes": self.pod_memory_bytes,
            "shmBytes": self.shm_bytes,
            "diskBytes": self.disk_bytes,
        }


class SizingPlan(Record):
    """The result of `plan()`."""

    input: SizingInput
    kv_cache_dtype: str  # resolved: never "auto"
    kv_bytes_per_element: int
    kv_heads_per_rank: int
    sessions_per_replica: int
    sizing: Sizing
    tiers: tuple[TierAssessment, ...]
    disk: str | None  # the chosen secondary tier
    fio_block_size: int
    fio_command: str
    connector: ConnectorSettings  # the vLLM config but the CPU tier's bytes (sizing's own)
    decisions: dict[str, str]  # sizing field → one line saying why
    warnings: tuple[str, ...]
    release: VLLMRelease
    layout: OffloadLayout
    # Pod-spec steps this release needs: remove a stale /dev/shm offload file before vLLM
    # starts; one PYTHONHASHSEED for replicas that share a disk tier.
    clear_stale_shm_file: bool = False
    shared_hash_seed: bool = False

    @property
    def kv_transfer_config(self) -> dict[str, Any]:
        """vLLM's --kv-transfer-config for one engine of this plan."""
        return self.connector.kv_transfer_config(self.sizing.cpu_bytes_to_use)

    def to_status(self) -> dict[str, Any]:
        """The `sizing` and `tiers` figures of KVCacheTier status."""
        return {
            "sizing": {**self.sizing.to_status(), "vllmRelease": self.release.series},
            "tiers": [
                {
                    "name": t.name,
                    "crossoverTokens": t.crossover_tokens,
                    "restoreBlocksPerSecond": t.restore_blocks_per_second,
                    "beneficial": t.beneficial,
                    "decidedBy": t.decided_by,
                    "latency": t.latency.as_dict() if t.latency else None,
                    "throughput": t.throughput.as_dict() if t.throughput else None,
                }
                for t in self.tiers
                if t.selected
            ],
        }

    def as_dict(self) -> dict[str, Any]:
        """Everything, camelCase: the `kvtier plan -o json` document."""
        g = self.input.geometry
        return {
            "model": {
                "name": g.name,
                "source": g.source,
                "attentionLayers": g.attention_layers,
                "totalLayers": g.total_layers,
                "kvHeads": g.kv_heads,
                "headDim": g.head_dim,
                "latentAttention": g.latent_attention,
                "modelDtype": g.model_dtype,
                "kvCacheDtype": self.kv_cache_dtype,
                "kvBytesPerElement": self.kv_bytes_per_element,
                "tensorParallelSize": self.input.tensor_parallel_size,
                "kvHeadsPerRank": self.kv_heads_per_rank,
            },
            "workload": {
                "averageContextTokens": self.input.average_context_tokens,
                "concurrentSessions": self.input.concurrent_sessions,
                "sessionsPerReplica": self.sessions_per_replica,
                "replicas": self.input.replicas,
                "blockSizeTokens": self.input.block_tokens,
            },
            "vllm": {
                "version": self.input.vllm_version,
                "release": self.release.series,
                "gpuBlockSizeTokens": self.input.gpu_block_tokens,
                "hybridKVCacheManager": self.input.hybrid_kv_cache_manager,
                "dataParallelSize": self.input.data_parallel_size,
                "distributedExecutorBackend": self.input.distributed_executor_backend,
                "tokensPerChunk": self.layout.tokens_per_chunk,
                "layersPerChunk": self.layout.layers_per_chunk,
                "kvCacheGroups": [
                    {"layers": g.layers, "windowChunks": g.window_chunks}
                    for g in self.layout.groups
                ],
                "chunkAlignment": self.layout.alignment,
                "replicatedLayout": self.layout.replicated,
                "cpuTierInShm": self.sizing.shm_bytes is not None,
                "clearStaleShmFile": self.clear_stale_shm_file,
                "sharedHashSeed": self.shared_hash_seed,
            },
            "sizing": self.sizing.as_dict(),
            "tiers": [t.as_dict() for t in self.tiers],
            "fioBlockSize": self.fio_block_size,
            "fioCommand": self.fio_command,
            "kvTransferConfig": self.kv_transfer_config,
            "decisions": self.decisions,
            "warnings": list(self.warnings),
        }


def plan(inp: SizingInput) -> SizingPlan:
    """Size the CPU tier, choose the topology, assess disk tiers, write the vLLM config."""
    g = inp.geometry
    release = vllm_release(inp.vllm_version)
    if g.linear_attention_blocks and not release.builds_linear_attention_blocks:
        raise SizingError(
            "vllmVersion",
            f"vLLM {release.series} cannot build {g.name}'s {g.linear_attention_blocks} "
            "replace_with_linear attention blocks; serve it with a release that can (0.24)",
        )
    dtype, dtype_bytes = resolve_kv_dtype(inp.kv_cache_dtype, g.model_dtype)
    # The chunk alignment may differ with a disk tier (TieringOffloadingSpec), which is chosen
    # from whether the working set fits: size CPU-only first, then again if a disk is chosen.
    cpu_only = _size(inp, release, dtype, dtype_bytes, tiering=False)
    topo = choose_topology(cpu_only.fits, inp.replicas, inp.available_disk_types, inp.disk_type)
    sized = cpu_only
    if topo.disk is not None:
        sized = _size(inp, release, dtype, dtype_bytes, tiering=True)
    decisions, warnings = sized.decisions, sized.warnings
    layout, cpu = sized.layout, sized.cpu
    decisions["topology"] = topo.reason
    warnings.extend(topo.warnings)

    disk_size = disk_bytes(topo.disk, sized.working_set, sized.context * inp.concurrent_sessions)
    decisions["diskBytes"] = _disk_why(topo.disk)

    tiers = _assess_tiers(inp, topo.disk, layout.chunk_bytes, sized)
    if any(t.name == "ObjectStore" for t in tiers):
        warnings.append(_OBJECT_STORE_WARNING)
    for tier in tiers:
        if tier.selected and tier.beneficial is False:
            warnings.append(f"{tier.name} tier: {tier.reason}")

    engines = inp.data_parallel_size
    pod_memory = _ceil_mul(cpu * engines, inp.memory_overhead_factor) + inp.headroom_bytes
    decisions["podMemoryBytes"] = (
        f"{inp.memory_overhead_factor:g} × CPU tier"
        + (f" × {engines} data-parallel engines" if engines > 1 else "")
        + f" (vLLM pinned/shared buffers reach ~1.9×) + {human_bytes(inp.headroom_bytes)} headroom"
    )
    in_shm = topo.disk is not None or release.cpu_only_in_shm
    shm = cpu * engines + inp.headroom_bytes if in_shm else None
    decisions["shmBytes"] = (
        f"/dev/shm holds the whole CPU tier file (vllm_offload_*.mmap) of each engine + headroom "
        f"(vLLM {release.series})"
        if in_shm
        else f"none: vLLM {release.series} keeps a CPU-only tier in private pinned memory"
    )
    clear_stale = in_shm and release.leaves_stale_shm_file
    if clear_stale:
        decisions["clearStaleShmFile"] = (
            f"vLLM {release.series} leaves vllm_offload_*.mmap in /dev/shm after an OOMKill; "
            "it is removed before vLLM starts"
        )
    shared_seed = release.needs_shared_hash_seed
    decisions["sharedHashSeed"] = (
        f"vLLM {release.series} hashes blocks with PYTHONHASHSEED: replicas sharing a disk tier "
        "need the same one"
        if shared_seed
        else f"vLLM {release.series} hashes blocks without PYTHONHASHSEED"
    )

    block = layout.chunk_bytes
    fio_bs = fio_block_size(block)
    decisions["fioBlockSize"] = (
        "the server-wide block size"
        if fio_bs == block
        else f"{block:,} B rounded up to {fio_bs:,} B: O_DIRECT needs 4 KiB-aligned I/O"
    )
    command = fio_command(
        block,
        inp.fs_root_dir,
        jobs=inp.probe_jobs,
        runtime_seconds=inp.probe_runtime_seconds,
        size_bytes=inp.probe_file_bytes,
    )
    store = None
    if topo.disk == "ObjectStore":
        if not (inp.object_store_bucket and inp.object_store_endpoint):
            raise SizingError(
                "disk.objectStore",
                "an ObjectStore tier needs its bucket and endpoint (vLLM refuses an obj tier "
                "without them)",
            )
        store = ObjectStore(
            inp.object_store_bucket,
            inp.object_store_endpoint,
            keys_in_config=release.object_store_keys_in_config,
        )
        decisions["objectStore"] = (
            f"store_config with the bucket and endpoint; credentials from the container env "
            f"{ACCESS_KEY_ENV} / {SECRET_KEY_ENV} (a Secret by reference), "
            + (
                f"expanded into the config by Kubernetes: vLLM {release.series} requires them there"
                if release.object_store_keys_in_config
                else f"read by vLLM {release.series}'s AWS SDK"
            )
        )
    connector = ConnectorSettings(
        inp.block_tokens,
        topo.disk,
        eviction_policy=inp.eviction_policy,
        fs_root_dir=inp.fs_root_dir,
        n_read_threads=inp.n_read_threads,
        n_write_threads=inp.n_write_threads,
        object_store=store,
    )

    return SizingPlan(
        input=inp,
        kv_cache_dtype=dtype,
        kv_bytes_per_element=dtype_bytes,
        kv_heads_per_rank=kv_heads_per_rank(g, inp.tensor_parallel_size),
        sessions_per_replica=sized.sessions,
        sizing=Sizing(
            bytes_per_token=sized.per_token,
            bytes_per_token_per_rank=sized.per_rank,
            block_bytes=block,
            context_bytes=sized.context,
            cpu_chunks=layout.chunks_in(cpu),
            working_set_bytes=sized.working_set,
            working_set_bytes_all_replicas=sized.context * inp.concurrent_sessions,
            cpu_bytes_to_use=cpu,
            fits_in_cpu=sized.fits,
            contexts_in_cpu=round(cpu / sized.context, 2) if sized.context else 0.0,
            topology=topo.topology,
            pod_memory_bytes=pod_memory,
            shm_bytes=shm,
            disk_bytes=disk_size,
        ),
        tiers=tiers,
        disk=topo.disk,
        fio_block_size=fio_bs,
        fio_command=command,
        connector=connector,
        decisions=decisions,
        warnings=tuple(warnings),
        release=release,
        layout=layout,
        clear_stale_shm_file=clear_stale,
        shared_hash_seed=shared_seed,
    )


class _Sized(Record):
    """The CPU tier for one layout (CPU-only or tiering), with its reasons."""

    layout: OffloadLayout
    per_rank: int
    per_token: int
    context: int
    sessions: int
    working_set: int
    cpu: int
    fits: bool
    decisions: dict[str, str]
    warnings: list[str]


def _size(
    inp: SizingInput, release: VLLMRelease, dtype: str, dtype_bytes: int, *, tiering: bool
) -> _Sized:
    g = inp.geometry
    tp = inp.tensor_parallel_size
    per_rank = bytes_per_token_per_rank(g, tp, dtype_bytes)
    per_token = per_rank * tp
    layout = offload_layout(
        g,
        tensor_parallel_size=tp,
        dtype_bytes=dtype_bytes,
        tokens_per_chunk=inp.block_tokens,
        release=release,
        hybrid_kv_cache_manager=inp.hybrid_kv_cache_manager,
        tiering=tiering,
        executor=inp.distributed_executor_backend,
        pipeline_parallel_size=inp.pipeline_parallel_size,
    )
    block = layout.chunk_bytes
    tokens = inp.average_context_tokens
    context = layout.context_bytes(tokens)
    engines = inp.replicas * inp.data_parallel_size
    sessions = math.ceil(inp.concurrent_sessions / engines)
    working_set = context * sessions
    decisions: dict[str, str] = {}
    warnings: list[str] = []

    decisions["kvCacheDtype"] = (
        f"auto → {dtype} (model dtype {g.model_dtype})"
        if inp.kv_cache_dtype.strip().lower() == "auto"
        else f"{dtype} as requested"
    )
    decisions["bytesPerTokenPerRank"] = _per_rank_why(
        g, tp, kv_heads_per_rank(g, tp), dtype, dtype_bytes
    )
    decisions["bytesPerToken"] = f"{per_rank:,} B per rank × TP {tp} (the GPU KV cache of a token)"
    decisions["blockBytes"] = _chunk_why(inp, release, layout, per_rank)
    decisions["contextBytes"] = _context_why(inp, layout, context)
    decisions["workingSetBytes"] = (
        f"one {tokens:,}-token context {human_bytes(context)} × {sessions} sessions per engine "
        f"({inp.concurrent_sessions} sessions over {inp.replicas} replicas"
        + (
            f" × {inp.data_parallel_size} data-parallel engines"
            if inp.data_parallel_size > 1
            else ""
        )
        + ")"
    )
    decisions["workingSetBytesAllReplicas"] = (
        f"one context {human_bytes(context)} × {inp.concurrent_sessions} sessions"
    )
    if inp.max_model_len is not None and tokens > inp.max_model_len:
        warnings.append(
            f"the average context {tokens:,} tokens exceeds the server's --max-model-len "
            f"{inp.max_model_len:,}: vLLM refuses such requests"
        )
    if context == 0:
        warnings.append(
            f"a {tokens:,}-token context is shorter than one {inp.block_tokens}-token chunk: "
            "vLLM offloads whole chunks only, so nothing of it reaches the CPU tier"
        )

    cpu = _cpu_tier(inp, working_set, block, decisions, warnings)
    fits = cpu >= working_set
    decisions["fitsInCPU"] = (
        f"CPU tier {human_bytes(cpu)} {'≥' if fits else '<'} working set {human_bytes(working_set)}"
    )
    decisions["cpuChunks"] = f"cpu_bytes_to_use ÷ {block:,} B chunks (whole chunks only)"
    decisions["contextsInCPU"] = f"CPU tier ÷ one {tokens:,}-token context, {human_bytes(context)}"
    if context and cpu < context:
        warnings.append("the CPU tier holds less than one average context")
    _check_mirrors_hbm(inp, cpu, warnings)
    return _Sized(
        layout, per_rank, per_token, context, sessions, working_set, cpu, fits, decisions, warnings
    )


def _chunk_why(inp: SizingInput, release: VLLMRelease, layout: OffloadLayout, per_rank: int) -> str:
    layers = inp.geometry.attention_layers
    per_layer = per_rank // layers
    copies = (
        "× 1: one replicated copy for all TP ranks (MLA)"
        if layout.replicated
        else f"× TP {inp.tensor_parallel_size}"
    )
    group = (
        f"{layout.layers_per_chunk} layers of one KV cache group (hybrid manager: "
        f"{len(layout.groups)} groups of the {layers} layers, padded to equal size)"
        if layout.hybrid
        else f"{layers} layers"
    )
    text = f"{layout.tokens_per_chunk} tokens × {group} × {per_layer:,} B per layer-token {copies}"
    if layout.chunk_bytes != layout.raw_chunk_bytes:
        text += (
            f", {layout.raw_chunk_bytes:,} B rounded up to {layout.alignment:,} B "
            f"(vLLM {release.series} alignment)"
        )
    return text


def _context_why(inp: SizingInput, layout: OffloadLayout, context: int) -> str:
    tokens = inp.average_context_tokens
    whole = tokens // layout.tokens_per_chunk
    windows = [g for g in layout.groups if g.window_chunks is not None]
    text = f"{whole:,} whole chunks of {layout.tokens_per_chunk} tokens"
    if windows:
        full = len(layout.groups) - len(windows)
        text += (
            f" in {full} full-attention group(s), at most {windows[0].window_chunks} in each of "
            f"{len(windows)} sliding-window group(s)"
        )
    return f"{text}: {layout.chunks_for_context(tokens):,} chunks, {human_bytes(context)}"


def disk_bytes(disk: str | None, working_set: int, working_set_all_replicas: int) -> int | None:
    """The disk tier's default capacity, rounded up to whole GiB (CephFS quota granularity).

    CephFS: one volume all replicas share, so the working set of all of them (as the operator
    claims it without spec.disk.cephfs.size). NVMe: what one replica's local tier must hold,
    the working set per replica; the operator claims the pool's capacityPerNode unless
    spec.disk.nvme.size says otherwise, and this is the least that is worth claiming.
    ObjectStore and no disk tier: None (a bucket has no size to claim). By the type's facts
    (kvtier.sizing.disk_types): a type of vLLM's fs tier lives on a volume, which holds the
    working set of all replicas when they share it, else of one.
    """
    facts = DISK_BY_NAME.get(disk) if disk is not None else None
    if facts is None or facts.vllm_type != "fs":
        return None
    return -(-(working_set_all_replicas if facts.shared else working_set) // GiB) * GiB


def _disk_why(disk: str | None) -> str:
    facts = DISK_BY_NAME.get(disk) if disk is not None else None
    return facts.capacity if facts is not None else "no disk tier"


def cpu_tier_cap(inp: SizingInput) -> int | None:
    """The largest CPU tier the node affords one model-server pod, or None if memory is unknown.

    The pod's share of node memory (fraction ÷ pods per node), minus headroom, divided by the
    overhead factor, because the tier costs overhead × its size in pod memory.
    """
    if inp.node_memory_bytes is None:
        return None
    share = Decimal(inp.node_memory_bytes) * Decimal(str(inp.max_node_memory_fraction))
    budget = int(share) // inp.model_server_pods_per_node - inp.headroom_bytes
    return max(0, int(budget / Decimal(str(inp.memory_overhead_factor))))


def _cpu_tier(
    inp: SizingInput, working_set: int, block: int, decisions: dict[str, str], warnings: list[str]
) -> int:
    cap = cpu_tier_cap(inp)
    cap_why = (
        f"{inp.max_node_memory_fraction:g} of {human_bytes(inp.node_memory_bytes or 0)} node "
        f"memory ÷ {inp.model_server_pods_per_node} pod(s), − headroom, ÷ overhead "
        f"{inp.memory_overhead_factor:g}"
    )
    if inp.cpu_bytes is not None:
        cpu = inp.cpu_bytes
        if cpu < block:
            raise SizingError("cpu.size", f"{cpu:,} B is smaller than one {block:,} B block")
        decisions["cpuBytesToUse"] = "as requested"
        if cap is not None and cpu > cap:
            warnings.append(
                f"the requested CPU tier {human_bytes(cpu)} exceeds what the node affords one "
                f"pod, {human_bytes(cap)} ({cap_why})"
            )
        return cpu
    wanted = -(-working_set // block) * block  # whole blocks
    if cap is None:
        warnings.append("node memory unknown: the auto CPU tier is the whole working set, uncapped")
        decisions["cpuBytesToUse"] = "auto: the working set, rounded up to whole blocks"
        return wanted
    if cap < block:
        raise SizingError(
            "nodeMemoryBytes", f"leaves {human_bytes(cap)} for a CPU tier, less than one block"
        )
    if wanted <= cap:
        decisions["cpuBytesToUse"] = "auto: the working set, rounded up to whole blocks"
        return wanted
    decisions["cpuBytesToUse"] = f"auto: capped at whole blocks of {human_bytes(cap)} ({cap_why})"
    return cap // block * block


def _check_mirrors_hbm(inp: SizingInput, cpu: int, warnings: list[str]) -> None:
    gpu_kv = inp.gpu_kv_cache_bytes
    if gpu_kv is None and inp.gpu_memory_bytes and inp.model_weights_bytes:
        gpus = inp.gpu_count or inp.tensor_parallel_size
        usable = _ceil_mul(gpus * inp.gpu_memory_bytes, inp.gpu_memory_utilization)
        gpu_kv = usable - inp.model_weights_bytes
    if gpu_kv is not None and gpu_kv > 0 and cpu < gpu_kv:
        warnings.append(
            f"the CPU tier {human_bytes(cpu)} is smaller than the GPU KV cache "
            f"{human_bytes(gpu_kv)}: it only mirrors HBM and adds no hits"
        )


def _assess_tiers(
    inp: SizingInput, disk: str | None, block: int, sized: _Sized
) -> tuple[TierAssessment, ...]:
    # Every disk type that could be chosen or was measured, in a stable order.
    names = [
        d
        for d in DISK_TYPES
        if d in inp.available_disk_types
        or d in inp.tier_p99_seconds
        or d in inp.tier_bandwidth_bytes_per_second
        or d == disk
    ]
    return tuple(
        assess_tier(
            name,
            selected=name == disk,
            context_tokens=inp.average_context_tokens,
            block_tokens=inp.block_tokens,
            block_bytes=block,
            ttft_seconds=inp.baseline_ttft_seconds,
            p99_seconds=inp.tier_p99_seconds.get(name),
            bandwidth=inp.tier_bandwidth_bytes_per_second.get(name),
            share=tier_share(sized.cpu, sized.working_set, inp.replicas, name in SHARED_DISK_TYPES),
            # What a restore moves: the stored bytes of a context (groups, windows, copies).
            bytes_per_token=max(1, sized.context // inp.average_context_tokens),
            prefill_seconds_per_token=inp.prefill_seconds_per_token,
        )
        for name in names
    )


def _per_rank_why(g: ModelGeometry, tp: int, heads: int, dtype: str, dtype_bytes: int) -> str:
    if g.latent_attention:
        return (
            f"{g.attention_layers} layers × {g.head_dim} latent (MLA: not split into K/V, "
            f"not sharded by TP) × {dtype_bytes} B ({dtype})"
        )
    if tp > g.kv_heads:
        head_text = f"1 KV head/rank ({g.kv_heads} heads replicated over TP {tp})"
    else:
        head_text = f"{heads} KV head(s)/rank ({g.kv_heads} ÷ TP {tp})"
    return (
        f"2 (K,V) × {g.attention_layers} attention layers × {head_text} × {g.head_dim} head dim "
        f"× {dtype_bytes} B ({dtype})"
    )


def _ceil_mul(n: int, factor: float) -> int:
    """n × factor rounded up, exact for decimal factors such as 2.0 or 0.9."""
    return math.ceil(Decimal(n) * Decimal(str(factor)))
