"""What the simulator is given: hardware, model serving, workload and tiers.

Byte figures of the KV cache (bytes per token, block bytes, the auto CPU tier, the disk
tier's default capacity) are never computed here: `kvtier.simulate.setup` takes them from
kvtier's sizing engine. Every default is explained, with its source, in docs/simulator.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvtier.simulate.workload import SharedPrefix, Trace
from kvtier.sizing import DISK_TYPES, SizingError
from kvtier.sizing.disk_types import SHARED_DISK_TYPES

GiB = 1 << 30
TiB = 1 << 40
SCENARIOS = ("none", "cpu", "cpu+disk")
MAX_DURATION_SECONDS = 7 * 24 * 3600.0  # far past any steady state; bounds a mistyped run
ROUTINGS = ("random", "round-robin", "sticky", "prefix")
# llm-d's default scheduling profile: queue-scorer 2, kv-cache-utilization-scorer 2,
# prefix-cache-scorer 3 (docs/simulator.md); and the prefix index's default capacity.
DEFAULT_ROUTER_WEIGHTS = (2.0, 2.0, 3.0)
DEFAULT_LRU_CAPACITY_PER_SERVER = 31_250
ROUTER_BLOCK_TOKENS = 16  # the prefix producer's default blockSizeTokens (vLLM's default block)
# always: every hit is restored, as vLLM does; faster: a disk restore that the tier's queue
# would make slower than recomputing the part is skipped (a load-aware what-if).
RESTORE_POLICIES = ("always", "faster")


@dataclass(frozen=True)
class GPU:
    """One accelerator's datasheet figures and the efficiencies assumed of them."""

    name: str
    memory_bytes: int
    peak_flops: float  # dense 16-bit tensor FLOP/s
    hbm_bytes_per_second: float
    host_link_bytes_per_second: float  # CPU tier ↔ GPU copies, per GPU
    prefill_flops_efficiency: float = 0.5  # model FLOPs utilisation of a long prefill
    hbm_efficiency: float = 0.7  # share of HBM bandwidth a decode step reaches


# NVIDIA H100 SXM5 datasheet: 80 GB HBM3 (taken as 80 GiB), 989.4 TFLOPS BF16 dense,
# 3.35 TB/s HBM, PCIe Gen5 x16 to the host.
H100 = GPU(
    name="H100-SXM",
    memory_bytes=80 * GiB,
    peak_flops=989.4e12,
    hbm_bytes_per_second=3.35e12,
    host_link_bytes_per_second=25e9,
)
GPUS = {"h100": H100}


@dataclass(frozen=True)
class DiskTier:
    """A secondary tier: fio p99 per block and bandwidth, as `kvtier probe` measures them."""

    kind: str  # NVMe | CephFS | ObjectStore
    p99_seconds: float
    bandwidth_bytes_per_second: float
    capacity_bytes: int | None = None  # None: the sizing engine's default disk capacity

    @property
    def shared(self) -> bool:
        """CephFS and object stores are one cache for all replicas; NVMe is per node."""
        return self.kind in SHARED_DISK_TYPES


# The study's CephFS (ODF 4.18, 3 OSDs, replica-1 pools): ~205 MB/s protocol ceiling at 5 MB
# blocks; its p99 is taken at 50 ms (`kvtier plan --tier-p99 cephfs=0.05` in issue 23).
STUDY_CEPHFS = DiskTier("CephFS", p99_seconds=0.05, bandwidth_bytes_per_second=205e6)
# A local NVMe as kvtier's own probe tests measure it: p99 8.35 ms, 1.278 GB/s at 5 MB blocks.
STUDY_NVME = DiskTier("NVMe", p99_seconds=0.00835, bandwidth_bytes_per_second=6.5e9)


@dataclass(frozen=True)
class Workload:
    """Agentic sessions: a shared system prompt, a per-session context growing every turn.

    A session starts at about (1 - spread) × the average context and ends once its context
    passes (1 + spread) × it, so prompts average the given context; then a new session takes
    its place. Every turn appends the model's output and a tool result to the context.
    """

    average_context_tokens: int = 50_000
    sessions: int = 14  # concurrent, over all replicas
    context_spread: float = 0.4
    system_prompt_tokens: int = 8_000  # shared by every session
    output_tokens: int = 150  # mean, exponential
    tool_tokens: int = 2_000  # mean tool result appended per turn, exponential
    think_seconds: float = 0.0  # mean tool time between turns (0: a fixed-concurrency client)
    concurrency: int | None = None  # clients serving the sessions; None: one per session

    @property
    def longest_prompt(self) -> int:
        return self.end_tokens

    def validate(self) -> None:
        _positive("sessions", self.sessions)
        _positive("averageContextTokens", self.average_context_tokens)
        _positive("outputTokens", self.output_tokens)
        if self.tool_tokens < 0:
            raise SizingError("toolTokens", f"must be zero or more, got {self.tool_tokens}")
        if not 0 <= self.context_spread < 1:
            raise SizingError("contextSpread", f"must be in [0, 1), got {self.context_spread}")
        if not 0 <= self.system_prompt_tokens < self.start_tokens:
            raise SizingError(
                "systemPromptTokens",
                f"must be below a session's starting context {self.start_tokens:,}",
            )
        if self.concurrency is not None and not 0 < self.concurrency <= self.sessions:
            raise SizingError("concurrency", f"must be 1 to the {self.sessions} sessions")
        if not (math.isfinite(self.think_seconds) and self.think_seconds >= 0):
            raise SizingError("thinkSeconds", f"must be zero or more, got {self.think_seconds}")

    @property
    def start_tokens(self) -> int:
        return round(self.average_context_tokens * (1 - self.context_spread))

    @property
    def end_tokens(self) -> int:
        return round(self.average_context_tokens * (1 + self.context_spread))


@dataclass(frozen=True)
class SimConfig:
    """One simulated deployment; `scenarios` are run on the same seeded workload."""

    model: str
    parameters: float  # model parameters (weights = parameters × weight bytes)
    active_parameters: float | None = None  # per token, for a mixture of experts; None: all
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    weights_bytes: int | None = None  # None: parameters × weight_bytes
    tensor_parallel_size: int = 8
    query_heads: int | None = None  # None: 8 query heads per KV head (GQA-8)
    kv_cache_dtype: str = "auto"
    weight_bytes: float = 2.0  # per parameter: 2 for 16-bit, 1 for FP8, ~0.53 for MXFP4
    block_tokens: int = 16
    gpu: GPU = H100
    gpu_memory_utilization: float = 0.9  # vLLM's default
    gpu_reserved_bytes: int = 4 * GiB  # per GPU: activations, CUDA graphs, NCCL buffers
    max_batched_tokens: int = 8192  # vLLM 0.24 default on ≥70 GB GPUs (OpenAI server)
    max_num_seqs: int = 256
    prefill_tokens_per_second: float | None = None  # None: from FLOPs
    # The prompt length the prefill rate was measured at, from an empty cache (llm-d's
    # calibrate.sh: CHUNK_SIZE / median TTFT); its attention is taken out of the rate so the
    # linear layers and the attention each keep their own cost. None: the linear layers' rate.
    prefill_reference_tokens: int | None = None
    decode_tokens_per_second: float | None = None  # one sequence; None: from HBM bandwidth
    replicas: int = 1
    routing: str = "random"
    router_weights: tuple[float, float, float] = DEFAULT_ROUTER_WEIGHTS  # queue, KV, prefix
    lru_capacity_per_server: int = DEFAULT_LRU_CAPACITY_PER_SERVER  # router index, in blocks
    # The prefix producer's autoTune: the GPU index takes the servers' block size and GPU
    # block count (vLLM's metrics) instead of 16-token blocks and lru_capacity_per_server.
    router_autotune: bool = False
    # llm-d's tiered routing: a second prefix scorer for what the CPU tiers hold, weighed
    # beside the others when the scenario has a CPU tier (0: none), with its own index.
    cpu_prefix_weight: float = 0.0
    cpu_lru_capacity_per_server: int = DEFAULT_LRU_CAPACITY_PER_SERVER
    cpu_router_block_tokens: int = ROUTER_BLOCK_TOKENS
    # llm-d's no-hit-lru-scorer: a request no server's GPU index matches goes to the server
    # that took such a request least recently (0: none).
    no_hit_lru_weight: float = 0.0
    restore_policy: str = "always"
    offload_prompt_only: bool = True  # the OffloadingConnector's option: outputs stay on GPU
    # When the OffloadingConnector stores. False: a prompt once its prefill ends, and with
    # sliding-window layers their chunk only at its end. True (vLLM v0.22.0): every block
    # the engine computes, each step, a sliding-window block beside each full-attention one,
    # so a tier returns any stored block boundary and a token takes every layer's bytes there.
    offload_every_block: bool = False
    # Whether vLLM keeps its hybrid KV cache manager on with the offloading connector (the
    # default since the connector supports it, vLLM 0.21-0.22); False: it is turned off, as
    # any --kv-transfer-config did before (docs/simulator.md). Only models with
    # sliding-window layers differ.
    connector_hybrid_kv: bool = True
    node_memory_bytes: int | None = 2 * TiB  # DGX H100 system memory
    cpu_bytes: int | None = None  # None: kvtier's auto CPU tier for the node
    disk: DiskTier | None = STUDY_NVME
    workload: Workload | SharedPrefix | Trace = field(default_factory=Workload)
    duration_seconds: float = 3600.0
    warmup_seconds: float = 600.0
    seed: int = 1
    scenarios: tuple[str, ...] = SCENARIOS

    def validate(self) -> None:
        self.workload.validate()
        _positive("parameters", self.parameters)
        _positive("weightBytes", self.weight_bytes)
        _positive("replicas", self.replicas)
        _positive("maxBatchedTokens", self.max_batched_tokens)
        _positive("maxNumSeqs", self.max_num_seqs)
        _positive("lruCapacityPerServer", self.lru_capacity_per_server)
        _positive("cpuLruCapacityPerServer", self.cpu_lru_capacity_per_server)
        _positive("cpuRouterBlockTokens", self.cpu_router_block_tokens)
        for name, weight in (
            ("cpuPrefixWeight", self.cpu_prefix_weight),
            ("noHitLruWeight", self.no_hit_lru_weight),
        ):
            if not (math.isfinite(weight) and weight >= 0):
                raise SizingError(name, "must be zero or more")
        if self.active_parameters is not None:
            _positive("activeParameters", self.active_parameters)
            if self.active_parameters > self.parameters:
                raise SizingError("activeParameters", "must be at most the parameters")
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise SizingError("expertsPerToken", "must be 1 to the number of experts")
        if self.weights_bytes is not None:
            _positive("weights", self.weights_bytes)
        if len(self.router_weights) != 3 or any(
            not (math.isfinite(w) and w >= 0) for w in self.router_weights
        ):
            raise SizingError("routerWeights", "three weights, zero or more: queue,kv,prefix")
        _positive("durationSeconds", self.duration_seconds)
        if isinstance(self.workload, Trace) and self.workload.duration >= self.duration_seconds:
            raise SizingError(
                "durationSeconds",
                f"must be past the trace's last arrival ({self.workload.duration:g} s)",
            )
        if self.duration_seconds > MAX_DURATION_SECONDS:
            raise SizingError(
                "durationSeconds",
                f"must be at most {MAX_DURATION_SECONDS:,.0f} s (a week) of simulated time, "
                f"got {self.duration_seconds:g}",
            )
        if self.query_heads is not None:
            _positive("queryHeads", self.query_heads)
        if self.prefill_reference_tokens is not None:
            _positive("prefillReferenceTokens", self.prefill_reference_tokens)
            if self.prefill_tokens_per_second is None:
                raise SizingError("prefillReferenceTokens", "needs a measured prefill rate")
        for name, rate in (
            ("prefillTokensPerSecond", self.prefill_tokens_per_second),
            ("decodeTokensPerSecond", self.decode_tokens_per_second),
        ):
            if rate is not None:
                _positive(name, rate)
        if not 0 <= self.warmup_seconds < self.duration_seconds:
            raise SizingError("warmupSeconds", "must be zero or more and below the duration")
        if self.routing not in ROUTINGS:
            raise SizingError("routing", f"use {'|'.join(ROUTINGS)}")
        if self.restore_policy not in RESTORE_POLICIES:
            raise SizingError("restorePolicy", f"use {'|'.join(RESTORE_POLICIES)}")
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown or not self.scenarios:
            raise SizingError("scenarios", f"use some of {', '.join(SCENARIOS)}")
        if "cpu+disk" in self.scenarios and self.disk is None:
            raise SizingError("disk", "the cpu+disk scenario needs a disk tier")
        if self.disk is not None:
            if self.disk.kind not in DISK_TYPES:
                raise SizingError("disk", f"use {'|'.join(DISK_TYPES)}")
            _positive("tierP99Seconds", self.disk.p99_seconds)
            _positive("tierBandwidth", self.disk.bandwidth_bytes_per_second)


def study_config(**overrides: object) -> SimConfig:
    """The study's headline setup: Nemotron-Ultra-253B, TP 8 on 8×H100, ~50K-token prompts."""
    base: Mapping[str, object] = {
        "model": "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1",
        "parameters": 253e9,
        "query_heads": 128,  # its config.json: num_attention_heads
        "tensor_parallel_size": 8,
        # Not published for Nemotron: the 64 GB of the Qwen and Gemma runs is smaller than
        # Nemotron's GPU KV cache and would only mirror HBM (docs/simulator.md).
        "cpu_bytes": 128 * GiB,
    }
    return SimConfig(**{**base, **overrides})  # type: ignore[arg-type]


# llm-d's tiered-prefix-cache benchmark (guides/tiered-prefix-cache/benchmark-results-gpt-oss-
# 120b.md, added by llm-d commit 7489b5cc): the stages it ran.
LLMD_RATES = (5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0)


def llmd_gpt_oss_config(**overrides: object) -> SimConfig:
    """llm-d's gpt-oss-120b sweep: 16 servers of one H100 at TP 1, a 100 GiB CPU tier each,
    250 groups × 5 questions of 16,000 + 256 tokens and 256 output tokens, Poisson stages of
    60 s from 5 to 40 requests/s, the tiered guide's router, vLLM v0.22.0. docs/simulator.md
    gives the source (commit and file) of each value; nothing here is set from the published
    results."""
    from kvtier.simulate.models import MODEL_PARAMETERS
    from kvtier.simulate.workload import Stages

    known = MODEL_PARAMETERS["openai/gpt-oss-120b"]
    base: Mapping[str, object] = {
        "model": "openai/gpt-oss-120b",
        "parameters": known.total,
        "active_parameters": known.active,
        "experts": known.experts,
        "experts_per_token": known.experts_per_token,
        "weights_bytes": round(64.38 * GiB),  # what vLLM loads for it on one H100
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.95,  # the guide's vLLM arguments
        "block_tokens": 128,
        "max_num_seqs": 512,
        "replicas": 16,
        # The guide's router at the benchmark's commit (tiered-prefix-cache-cpu.values.yaml):
        # queue, KV cache, GPU prefix, CPU prefix and no-hit-LRU scorers, all weighed 1.
        "routing": "prefix",
        "router_weights": (1.0, 1.0, 1.0),
        "router_autotune": True,  # the GPU producer's default autoTune
        "cpu_prefix_weight": 1.0,
        # The CPU producer: autoTune false, lruCapacityPerServer 82,000, blockSizeTokens its
        # default 16, which the router of that time (llm-d-router main) raises to its 64.
        "cpu_lru_capacity_per_server": 82_000,
        "cpu_router_block_tokens": 64,
        "no_hit_lru_weight": 1.0,
        "cpu_bytes": 100 * GiB,  # cpu_bytes_to_use 107374182400
        # vLLM v0.22.0 (the image the guide set): its OffloadingConnector has no prompt-only
        # option and stores every block it computes, sliding-window ones too.
        "offload_prompt_only": False,
        "offload_every_block": True,
        "disk": None,
        # inference-perf's shared_prefix data and stages: the shuffled list of prompts from
        # its start every stage, rate × 60 s requests, all answered, then the profile's
        # `interval` of 60 s before the next stage.
        # The harness decodes 16,000 + 256 random token ids to text and the server tokenizes
        # that text again, ~3 % longer: the benchmark counted 16,755 input tokens a request.
        "workload": SharedPrefix(
            prefix_tokens=16_491,
            question_tokens=264,
            stages=Stages(LLMD_RATES, 60.0, pause_seconds=60.0),
            order="list",
        ),
        # llm-d's calibration of this model on one H100 (vLLM, --max-num-batched-tokens 8192):
        # 39,065 tokens/s for an 8,192-token prompt from an empty cache.
        "prefill_tokens_per_second": 39_065.0,
        "prefill_reference_tokens": 8192,
        "duration_seconds": 3600.0,  # a bound: the sweep ends once its last stage is answered
        "warmup_seconds": 0.0,
        "scenarios": ("none", "cpu"),
    }
    return SimConfig(**{**base, **overrides})  # type: ignore[arg-type]


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not value > 0 or not math.isfinite(value):
        raise SizingError(name, f"must be greater than zero, got {value!r}")
