"""Drive vLLM's own classes over kvtier's models and kv-transfer-configs; write a golden file.

Runs INSIDE a vLLM virtualenv made by hack/conformance/run (never in the repo's .venv), from
the repository root. It imports the repository's pure `kvtier.sizing` (standard library only)
from operator/ to render the kv-transfer-configs kvtier would write. It is outside mypy's
`files` (pyproject.toml) because it imports vLLM, which the repo's .venv does not have.

What is vLLM's own code, and what is not:
- ModelConfig / CacheConfig / ParallelConfig / SchedulerConfig / KVTransferConfig / VllmConfig
  are built by vLLM from a local directory holding the model's config.json (skip_tokenizer_init,
  load_format dummy: no weights, no tokenizer). vLLM decides the per-rank KV heads
  (get_num_kv_heads), head size (get_head_size: the MLA latent for DeepSeek), MLA use
  (use_mla), attention-layer count (get_num_layers_by_block_type), the cache dtype
  (kv_cache_dtype_str_to_dtype) and whether the hybrid KV cache manager stays on (VllmConfig's
  own post-init, with the kv-transfer-config attached).
- THE ASSEMBLED PART: a GPU model runner builds the per-layer dict
  {layer name: KVCacheSpec} by asking each Attention module of the constructed model
  (`get_kv_cache_spec`), which needs a GPU and the weights' model class. `layer_specs()` below
  builds that dict instead, from vLLM's spec classes FullAttentionSpec, SlidingWindowSpec and
  MLAAttentionSpec, with the values the vLLM config objects above return. The lines that do so
  are the body of `layer_specs()` (the three `_make_spec` calls marked "ASSEMBLED") and
  `attention_layer_indices()`, which picks the layers that hold KV and those that slide.
  The KV cache layout (0.33) is then resolved by vLLM's resolve_kv_cache_layout with the
  layouts FLASH_ATTN (FLASHMLA for MLA) declares (`resolve_layout()`). Assumptions: the attention
  backend keeps the primary block size for sliding-window layers (FlashAttention on Hopper;
  other backends may pick another sliding-window block), and a layer slides when the text
  config's `layer_types` says "sliding_attention" (gpt-oss, Gemma 3).
- Except for Nemotron NAS models (DeciLM `block_configs`: Nemotron-Ultra), whose per-layer dict
  at TP 1 is vLLM's own: `model_layer_specs()` has vLLM's `initialize_model` construct the
  model class vLLM's registry picks (nemotron_nas.py's DeciLMForCausalLM: attention for each
  block unless `attention.no_op`, num_attention_heads // n_heads_in_group KV heads) on torch's
  meta device (no weights, no memory), in a one-rank gloo process group, and asks every
  attention layer it registered for its KVCacheSpec. While vLLM constructs the model, its
  layers' kernel-op lookups (e.g. SiluAndMul's silu_and_mul) get the same never-called stand-in
  as the capability queries below (listed in `stubbedKernelOps`). One process is one tensor-
  parallel rank, so at TP 8 the layers are those the TP-1 model built, assembled as above with
  vLLM's per-rank KV heads. Its config class is repository code that no registry serves:
  nemotron_nas_config.py registers a narrow stand-in (its header says what it does and where
  the config.json comes from); the record is `models[].vllmModel`, and a release whose model
  code cannot build the model records the error there instead of cases.
- get_global_kv_cache_groups / get_kv_cache_configs (or the release's equivalent) group the
  layers (hybrid manager on/off, padding), then build_offloading_config and
  OffloadingSpecFactory.create_spec build the CPU / tiering spec (chunk bytes with vLLM's
  4 KiB alignment, chunk count for a cpu_bytes_to_use), and spec.get_manager() constructs the
  tier manager for each kv-transfer-config kvtier renders; errors are recorded, not raised.
- On this machine vLLM sees no CUDA device, and its configs refuse to build without a platform.
  The harness sets vllm.platforms.current_platform to vLLM's own non-NVML CUDA platform class
  with the three device queries answered as one H100 would (class EmulatedH100): the platform
  kvtier sizes for, on which e.g. CPUOffloadingSpec's shared region and replicated MLA layout
  apply. The provenance says so (`platform`).
- vLLM's compiled kernel modules link against the NVIDIA driver (libcuda.so.1), absent here:
  they load as empty modules (class _DriverlessExtensions), and kernel capability queries
  ("..._supports_...") answer None; both listed in the provenance (`stubbedModules`,
  `stubbedKernelOps`). Nothing the harness calls runs a kernel. For the same reason
  compilation is off (enforce_eager, optimization level O0) and a checkpoint's weight
  `quantization_config` (fp8, mxfp4; it does not change the KV cache) is dropped from the
  config.json handed to vLLM (`models[].droppedQuantization`).
- `provenance` names the vLLM wheel pip installed (name, sha256: from the virtualenv's pip
  install report), the sha256 of every harness source, and `bodySha256`, a hash of the rest of
  the file (golden_provenance.py); tests/unit/test_golden_provenance.py checks all three.
- `contextBytes[N]` combines vLLM's numbers with one line of arithmetic (function
  `context_bytes`): every offloaded group stores floor(N / tokens per chunk) chunks (the
  offloading scheduler stores whole chunks only: `prompt_offloadable_tokens //
  tokens_per_chunk`), a sliding-window group at most its `sliding_window_size_in_chunks`,
  each chunk `kv_bytes_per_chunk` bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.abc
import importlib.machinery
import inspect
import io
import json
import logging
import os
import pathlib
import platform
import shutil
import socket
import sys
import tempfile
import time
import traceback
import types
import uuid
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "operator"))

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class _DriverlessExtensions(importlib.abc.MetaPathFinder):
    """Load vLLM's compiled kernel modules as empty modules when the NVIDIA driver is missing.

    vLLM's extension modules (vllm._C_stable_libtorch, vllm.vllm_flash_attn._vllm_fa3_C, ...)
    link against libcuda.so.1, the driver, which a machine without a GPU does not have; the
    CUDA platform module and the model registry import them. Nothing the harness calls runs a
    kernel. Each module replaced is listed in the provenance (`stubbedModules`).
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith("vllm."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return None
        spec.loader = _StubOnMissingDriver(spec.loader)
        return spec


class _StubOnMissingDriver(importlib.abc.Loader):
    def __init__(self, real: Any) -> None:
        self.real = real

    def create_module(self, spec: Any) -> Any:
        try:
            return self.real.create_module(spec)
        except ImportError as exc:
            if "libcuda" not in str(exc):
                raise
            STUBBED.append(spec.name)
            return types.ModuleType(spec.name)

    def exec_module(self, module: Any) -> None:
        if module.__name__ in STUBBED:
            return
        self.real.exec_module(module)


class _MissingKernelOp:
    """Stands for a kernel op of a stubbed extension: answers capability queries falsy."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, overload: str) -> _MissingKernelOp:
        return self


def _stub_missing_kernel_ops() -> None:
    """torch.ops.<vLLM namespace>.<op> of a stubbed extension: a falsy stand-in, listed.

    vLLM asks some kernels at import time whether they support this GPU
    (e.g. cutlass_scaled_mm_supports_fp8); without the extension such a query answers None.
    """
    import torch._ops

    original = torch._ops._OpNamespace.__getattr__

    def getattr_or_stub(self: Any, op_name: str) -> Any:
        try:
            return original(self, op_name)
        except AttributeError:
            # Only capability queries ("..._supports_..."), and any op while vLLM constructs a
            # model (its layers keep their kernel ops for a forward that never runs here):
            # other `hasattr` probes of real kernels must keep failing, or vLLM registers fake
            # implementations for them.
            wanted = "supports" in op_name or CONSTRUCTING_MODEL
            if not wanted or not STUBBED or not self.name.startswith("_"):
                raise
            STUBBED_OPS.add(f"{self.name}.{op_name}")
            return _MissingKernelOp(op_name)

    torch._ops._OpNamespace.__getattr__ = getattr_or_stub  # type: ignore[method-assign]


STUBBED: list[str] = []
STUBBED_OPS: set[str] = set()
CONSTRUCTING_MODEL = False  # set by model_layer_specs() while vLLM builds a model
sys.meta_path.insert(0, _DriverlessExtensions())
_stub_missing_kernel_ops()

import vllm  # noqa: E402
import vllm.platforms  # noqa: E402
from vllm.platforms import cuda as _cuda  # noqa: E402


class EmulatedH100(_cuda.NonNvmlCudaPlatform):  # type: ignore[misc]
    """vLLM's CUDA platform, answering the device queries as one H100 would (no GPU here)."""

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> Any:
        return _cuda.DeviceCapability(major=9, minor=0)

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "NVIDIA H100 80GB HBM3"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return 80 * (1 << 30)


vllm.platforms.current_platform = EmulatedH100()
EMULATED_PLATFORM = "vLLM CudaPlatform (non-NVML) answering as one H100 (sm90, 80 GiB)"

import golden_provenance  # noqa: E402  (this directory: the script's own)
import nemotron_nas_config  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    KVTransferConfig,
    LoadConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.v1 import kv_cache_interface as kvi  # noqa: E402

from kvtier import sizing  # noqa: E402

nemotron_nas_config.register()  # Nemotron-Ultra's config class (its header says why)

GiB = 1 << 30
CPU_BYTES_TO_USE = 64 * 10**9  # the study's CPU tier for Qwen and Gemma (64 GB)
CONTEXTS = (1_000, 50_000)
MANAGER_CPU_BYTES = 256 << 20  # small tier for constructing managers (a /dev/shm file)
MAX_MODEL_LEN = 32_768
TP_SIZES = (1, 8)
KV_DTYPES = ("auto", "fp8")
# (GPU --block-size, offload block_size in tokens). GPU block 64 is FlashMLA's (and one of
# FlashInfer-MLA's); an offload block of 16 over it is not a multiple: vLLM refuses it.
BLOCKS = ((16, 16), (16, 256), (64, 64), (64, 16))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "configs")


# ---------------------------------------------------------------- model configs


def catalog_models() -> list[dict[str, Any]]:
    """Every catalog model, with a config.json: the fixture where one exists, else derived.

    A derived config is the family fixture with the catalog's geometry written into it
    (layers, KV heads, head dim, and layer_types for gpt-oss); it is marked as such.
    """
    fixtures = {
        os.path.splitext(name)[0]: os.path.join(FIXTURES, name)
        for name in sorted(os.listdir(FIXTURES))
        if name.endswith(".json")
    }
    by_short = {
        "llama-3.1-70b": "llama-3.1-70b",
        "gpt-oss-120b": "gpt-oss-120b",
        "nemotron-ultra-253b": "nemotron-ultra-253b",
        "qwen3-32b": "qwen3-32b",
        "gemma-3-27b": "gemma-3-27b-it",
        "deepseek-v3": "deepseek-v3",
    }
    family = {"llama": "llama-3.1-70b", "gpt-oss": "gpt-oss-120b", "gemma": "gemma-3-27b-it"}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in sizing.load_catalog():
        fixture = by_short.get(entry.short)
        if fixture is not None:
            with open(fixtures[fixture], encoding="utf-8") as f:
                config = json.load(f)
            out.append(
                {
                    "model": entry.short,
                    "config": config,
                    "configSource": f"tests/fixtures/configs/{fixture}.json",
                }
            )
            seen.add(fixture)
            continue
        g = entry.geometry
        if entry.short.startswith("qwen3") and g.kv_heads == 4:
            base = "qwen3-32b"  # the MoE variants: same attention, other MLP
        else:
            base = next((v for k, v in family.items() if entry.short.startswith(k)), "qwen3-32b")
        with open(fixtures[base], encoding="utf-8") as f:
            config = json.load(f)
        text = config.get("text_config", config)
        text["num_hidden_layers"] = g.attention_layers
        text["num_key_value_heads"] = g.kv_heads
        text["head_dim"] = g.head_dim
        if "layer_types" in text:
            text["layer_types"] = [
                "sliding_attention" if i % 2 == 0 else "full_attention"
                for i in range(g.attention_layers)
            ]
        if "max_window_layers" in text:
            text["max_window_layers"] = g.attention_layers
        if text["num_attention_heads"] % g.kv_heads:
            text["num_attention_heads"] = g.kv_heads * 8
        out.append(
            {
                "model": entry.short,
                "config": config,
                "configSource": (
                    f"derived: tests/fixtures/configs/{base}.json with the catalog's "
                    f"geometry ({g.attention_layers} layers, {g.kv_heads} KV heads, "
                    f"head dim {g.head_dim})"
                ),
            }
        )
    for name, path in fixtures.items():  # fixture configs that are not catalog models
        if name not in seen:
            with open(path, encoding="utf-8") as f:
                out.append(
                    {
                        "model": name,
                        "config": json.load(f),
                        "configSource": f"tests/fixtures/configs/{name}.json",
                    }
                )
    return out


def _kwargs(cls: Any, **values: Any) -> dict[str, Any]:
    """Only the keyword arguments this release's class accepts (names move between releases)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return values
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return values
    return {k: v for k, v in values.items() if k in params}


def model_config(model_dir: str, kv_dtype: str) -> Any:
    del kv_dtype  # the cache dtype belongs to CacheConfig
    return ModelConfig(
        **_kwargs(
            ModelConfig,
            model=model_dir,
            tokenizer=model_dir,
            skip_tokenizer_init=True,
            trust_remote_code=False,
            dtype="auto",
            seed=0,
            max_model_len=MAX_MODEL_LEN,
            limit_mm_per_prompt={"image": 0},
            enforce_eager=True,  # no torch.compile / CUDA graphs: nothing here runs a kernel
        )
    )


def vllm_config(
    mc: Any, tp: int, kv_dtype: str, gpu_block: int, hybrid: bool | None, transfer: dict[str, Any]
) -> Any:
    cache = CacheConfig(
        **_kwargs(
            CacheConfig, block_size=gpu_block, cache_dtype=kv_dtype, enable_prefix_caching=True
        )
    )
    parallel = ParallelConfig(
        **_kwargs(ParallelConfig, tensor_parallel_size=tp, distributed_executor_backend="mp")
    )
    sched_kwargs: dict[str, Any] = {"max_model_len": MAX_MODEL_LEN, "is_encoder_decoder": False}
    if hybrid is not None:
        sched_kwargs["disable_hybrid_kv_cache_manager"] = not hybrid
    scheduler = SchedulerConfig(**_kwargs(SchedulerConfig, **sched_kwargs))
    kvt = KVTransferConfig(**transfer, engine_id=f"kvtier-conformance-{uuid.uuid4().hex[:12]}")
    return VllmConfig(
        **_kwargs(
            VllmConfig,
            model_config=mc,
            cache_config=cache,
            parallel_config=parallel,
            scheduler_config=scheduler,
            load_config=LoadConfig(load_format="dummy"),
            kv_transfer_config=kvt,
            # O0: no compilation passes, whose defaults import kernel ops (none run here).
            optimization_level=0,
        )
    )


# ---------------------------------------------------------------- per-layer specs


def _make_spec(cls: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _cache_torch_dtype(vc: Any) -> Any:
    from vllm.utils import torch_utils

    fn = getattr(torch_utils, "kv_cache_dtype_str_to_dtype", None)
    if fn is not None:
        return fn(vc.cache_config.cache_dtype, vc.model_config)
    from vllm.utils import STR_DTYPE_TO_TORCH_DTYPE  # type: ignore[attr-defined]

    dtype = vc.cache_config.cache_dtype
    return vc.model_config.dtype if dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[dtype]


def attention_layer_indices(mc: Any) -> tuple[list[int], set[int]]:
    """(layer indices holding KV, indices that slide), from the config vLLM loaded."""
    text = mc.hf_text_config
    total = mc.get_total_num_hidden_layers()
    if is_nas(mc):  # the layers vLLM's own model code gave attention (built at TP 1)
        layers = sorted(int(name.split(".")[2]) for name in NAS_TP1_SPECS[mc.model])
    else:
        layers = list(range(total))
    sliding: set[int] = set()
    types = getattr(text, "layer_types", None)
    if types is not None and mc.get_sliding_window() is not None:
        sliding = {i for i, t in enumerate(types) if t == "sliding_attention"}
    return layers, sliding


def is_nas(mc: Any) -> bool:
    """A Nemotron NAS model (DeciLM block_configs): sized by vLLM's own model code."""
    return getattr(mc.hf_config, "block_configs", None) is not None


_PARALLEL_STATE: list[bool] = []


def _one_rank_parallel_state(vc: Any) -> None:
    """vLLM's distributed state for one process (TP 1, PP 1, gloo), made once per run."""
    if _PARALLEL_STATE:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with socket.socket() as probe:  # a free port for the one-rank rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    with set_current_vllm_config(vc):
        initialize_model_parallel(
            **_kwargs(initialize_model_parallel, tensor_model_parallel_size=1)
        )
    _PARALLEL_STATE.append(True)


def model_layer_specs(vc: Any) -> dict[str, Any]:
    """vLLM's own per-layer specs: the model class its registry picks, built on the meta device.

    vLLM's `initialize_model` constructs the model (DeciLMForCausalLM: nemotron_nas.py builds
    attention for each block unless `attention.no_op`, with its own KV heads) on torch's meta
    device, so no weight takes memory; then every attention layer registered in the config's
    static forward context is asked for its KVCacheSpec, as GPUModelRunner.get_kv_cache_spec
    asks it. One process is one tensor-parallel rank: this runs at TP 1 only.
    """
    global CONSTRUCTING_MODEL
    import torch
    from vllm.model_executor.model_loader.utils import initialize_model

    try:
        from vllm.config import get_layers_from_vllm_config
    except ImportError:  # 0.24
        from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    _one_rank_parallel_state(vc)
    CONSTRUCTING_MODEL = True
    try:
        with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
            initialize_model(vc)
    finally:
        CONSTRUCTING_MODEL = False
    specs: dict[str, Any] = {}
    for name, layer in get_layers_from_vllm_config(vc, AttentionLayerBase).items():
        spec = layer.get_kv_cache_spec(vc)
        if spec is not None:
            specs[name] = spec
    return specs


# model directory -> vLLM's own specs at TP 1 (nas_model_record, before the model's cases run)
NAS_TP1_SPECS: dict[str, dict[str, Any]] = {}


def nas_model_record(mc: Any) -> dict[str, Any]:
    """What vLLM's own model code built for a NAS model (TP 1, --kv-cache-dtype auto)."""
    vc = vllm_config(mc, 1, "auto", 16, None, cpu_transfer(CPU_BYTES_TO_USE, 16))
    specs = model_layer_specs(vc)
    NAS_TP1_SPECS[mc.model] = specs
    kinds = sorted({type(s).__name__ for s in specs.values()})
    return {
        "totalLayers": mc.get_total_num_hidden_layers(),
        "attentionLayers": len(specs),
        "kvHeads": sorted({s.num_kv_heads for s in specs.values()}),
        "headSize": sorted({s.head_size for s in specs.values()}),
        "specs": kinds,
        "attentionLayerIndices": sorted(int(n.split(".")[2]) for n in specs),
        "maxPositionEmbeddings": mc.hf_text_config.max_position_embeddings,
    }


def layer_specs(vc: Any) -> dict[str, Any]:
    """ASSEMBLED: the per-layer {name: KVCacheSpec} a GPU model runner would report."""
    mc = vc.model_config
    if is_nas(mc) and vc.parallel_config.tensor_parallel_size == 1:
        return model_layer_specs(vc)  # vLLM's own, from its model code
    block = vc.cache_config.block_size
    dtype = _cache_torch_dtype(vc)
    heads = mc.get_num_kv_heads(vc.parallel_config)
    head = mc.get_head_size()
    layers, sliding = attention_layer_indices(mc)
    window = mc.get_sliding_window()
    specs: dict[str, Any] = {}
    for i in layers:
        name = f"model.layers.{i}.self_attn.attn"
        if mc.use_mla:  # ASSEMBLED (MLA)
            specs[name] = _make_spec(
                kvi.MLAAttentionSpec,
                block_size=block,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=head,
                dtype=dtype,
                cache_dtype_str=vc.cache_config.cache_dtype,
            )
        elif i in sliding:  # ASSEMBLED (sliding window)
            specs[name] = _make_spec(
                kvi.SlidingWindowSpec,
                block_size=block,
                num_kv_heads=heads,
                head_size=head,
                head_size_v=head,
                dtype=dtype,
                sliding_window=window,
            )
        else:  # ASSEMBLED (full attention)
            specs[name] = _make_spec(
                kvi.FullAttentionSpec,
                block_size=block,
                num_kv_heads=heads,
                head_size=head,
                head_size_v=head,
                dtype=dtype,
            )
    return specs


# ---------------------------------------------------------------- vLLM's grouping


def kv_cache_configs(vc: Any, specs: dict[str, Any]) -> list[Any]:
    """vLLM's KV cache configs, one per worker (all TP ranks of one stage report the same)."""
    world = vc.parallel_config.world_size
    per_worker = [dict(specs) for _ in range(world)]
    memory = [1 << 40] * world  # plenty: no GPU is sized here, only the grouping matters
    from vllm.v1.core import kv_cache_utils

    planning = kv_cache_utils
    with contextlib.suppress(ImportError):
        from vllm.v1.core import kv_cache_planning as planning  # type: ignore[no-redef]
    get_configs = planning.get_kv_cache_configs
    resolve_layout(vc, specs)
    if len(inspect.signature(get_configs).parameters) >= 4:
        groups = planning.get_global_kv_cache_groups(vc, per_worker)
        return list(get_configs(vc, per_worker, memory, groups))
    return list(get_configs(vc, per_worker, memory))


def resolve_layout(vc: Any, specs: dict[str, Any]) -> None:
    """Releases that resolve a KV cache layout in the engine core (0.33): do as it does.

    A GPU worker reports the layouts its attention backends support; the harness asks the
    backend class vLLM uses on Hopper (FLASH_ATTN; FLASHMLA for MLA) for its list.
    """
    try:
        from vllm.v1.attention.backends import utils as backend_utils
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
    except ImportError:
        return
    resolve = getattr(backend_utils, "resolve_kv_cache_layout", None)
    if resolve is None or vc.cache_config.kv_cache_layout is not None:
        return
    name = "FLASHMLA" if vc.model_config.use_mla else "FLASH_ATTN"
    backend = AttentionBackendEnum[name].get_class()
    layouts = [layout.name for layout in backend_utils.get_supported_kv_cache_layouts([backend])]
    resolve(vc, [layouts] * vc.parallel_config.world_size, list(specs.values()))


def group_summary(config: Any) -> list[dict[str, Any]]:
    out = []
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        first = next(iter(kvi.iter_layer_specs(spec))) if hasattr(kvi, "iter_layer_specs") else spec
        out.append(
            {
                "spec": type(first).__name__,
                "layers": len(group.layer_names),
                "blockSize": first.block_size,
                "pageSizeBytes": first.page_size_bytes,
                "numKVHeads": getattr(first, "num_kv_heads", None),
                "headSize": getattr(first, "head_size", None),
                "slidingWindow": getattr(first, "sliding_window", None),
            }
        )
    return out


# ---------------------------------------------------------------- offloading


def offloading_spec(vc: Any, config: Any) -> Any:
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
            build_offloading_config,
        )
    except ImportError:  # releases whose specs take (vllm_config, kv_cache_config)
        return OffloadingSpecFactory.create_spec(vc, config)
    return OffloadingSpecFactory.create_spec(build_offloading_config(vc, config))


def spec_summary(spec: Any, kv_cache_config: Any) -> dict[str, Any]:
    """The offloading spec's own figures (attribute names differ between releases)."""
    cfg = getattr(spec, "config", None)  # 0.33: the normalized OffloadingConfig
    world = spec_world_size(spec)
    replicated = getattr(spec, "replicated_layout", None)
    blocks_per_chunk = _first_attr(spec, "blocks_per_chunk", "block_size_factor")
    groups: list[dict[str, Any]] = []
    if cfg is not None and getattr(cfg, "groups", None) is not None:
        for g in cfg.groups:
            groups.append(
                {
                    "tokensPerChunk": g.tokens_per_block * blocks_per_chunk,
                    "layers": len(g.layer_names),
                    "slidingWindowSizeInChunks": g.sliding_window_size_in_chunks,
                }
            )
    else:  # 0.24: the scheduler side derives the per-group offload config from the spec
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
            SchedulerOffloadConfig,
        )

        for g in SchedulerOffloadConfig.from_spec(spec).kv_group_configs:
            groups.append(
                {
                    "tokensPerChunk": g.offloaded_block_size,
                    "layers": len(kv_cache_config.kv_cache_groups[g.group_idx].layer_names),
                    "slidingWindowSizeInChunks": g.sliding_window_size_in_blocks,
                }
            )
    per_worker = getattr(spec, "cpu_page_size_per_worker", None)
    copies = 1 if replicated else world
    return {
        "spec": type(spec).__name__,
        "worldSize": world,
        "blocksPerChunk": blocks_per_chunk,
        "tokensPerChunk": groups[0]["tokensPerChunk"] if groups else None,
        "alignment": getattr(spec, "BLOCK_SIZE_ALIGNMENT", None),
        "cpuPageSizePerWorker": per_worker,
        "rawKVBytesPerChunk": per_worker * copies if per_worker is not None else None,
        "kvBytesPerChunk": _first_attr(spec, "kv_bytes_per_chunk", "kv_bytes_per_offloaded_block"),
        "numChunks": _first_attr(spec, "num_chunks", "num_blocks"),
        "replicatedLayoutConfig": getattr(cfg, "replicated_layout", None),
        "replicatedLayout": replicated,
        "groups": groups,
    }


def spec_world_size(spec: Any) -> int:
    cfg = getattr(spec, "config", None)
    if cfg is not None and hasattr(cfg, "parallel"):
        return int(cfg.parallel.world_size)
    return int(spec.vllm_config.parallel_config.world_size)


def _first_attr(obj: Any, *names: str) -> Any:
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def context_bytes(summary: dict[str, Any], tokens: int) -> int | None:
    """CPU bytes one context of `tokens` occupies (see the header)."""
    per_chunk = summary["kvBytesPerChunk"]
    if not per_chunk or not summary["groups"]:
        return None
    chunks = 0
    for g in summary["groups"]:
        n = tokens // g["tokensPerChunk"]  # only whole chunks are stored
        if g["slidingWindowSizeInChunks"] is not None:
            n = min(n, g["slidingWindowSizeInChunks"])
        chunks += n
    return int(chunks * per_chunk)


def build_manager(vc: Any, config: Any) -> dict[str, Any]:
    """Construct the tier manager for a rendered config; record the error if vLLM refuses it."""
    spec = None
    try:
        spec = offloading_spec(vc, config)
        manager = spec.get_manager()
        return {"builds": True, "manager": type(manager).__name__}
    except Exception as exc:  # recorded: kvtier renders it, vLLM must take it
        return {"builds": False, "error": f"{type(exc).__name__}: {_first_line(exc)}"}
    finally:
        _close(spec)


def check_store_configs(transfer: dict[str, Any]) -> dict[str, Any]:
    """An obj tier's store_config through vLLM's own ObjStoreConfig and its NIXL parameters.

    The obj tier's constructor then starts a NIXL agent with the OBJ backend, whose plugin
    links NVIDIA's libcuobjclient (not on PyPI): where it cannot load, `builds` records that
    error and this records that vLLM took the config itself.
    """
    tiers = transfer["kv_connector_extra_config"].get("secondary_tiers") or []
    configs = [t["store_config"] for t in tiers if t.get("type") == "obj" and "store_config" in t]
    if not configs:
        return {}
    from vllm.v1.kv_offload.tiering.obj.config import ObjStoreConfig

    try:
        params = [sorted(ObjStoreConfig(**c).to_nixl_params()) for c in configs]
    except Exception as exc:
        return {"storeConfigAccepted": False, "storeConfigError": f"{type(exc).__name__}: {exc}"}
    return {"storeConfigAccepted": True, "nixlParams": params[0]}


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    # pydantic: "1 validation error for ModelConfig" / "  Value error, <the reason> [type=...]"
    reason = next((line for line in lines if line.startswith("Value error,")), None)
    if reason is not None:
        return f"{lines[0]}: {reason.split(' [type=')[0]}"[:400]
    return lines[0][:400] if lines else ""


def _close(spec: Any) -> None:
    if spec is None:
        return
    manager = getattr(spec, "_manager", None)
    with contextlib.suppress(Exception):
        if manager is not None and hasattr(manager, "shutdown"):
            manager.shutdown()
    region = getattr(spec, "_scheduler_mmap", None)
    with contextlib.suppress(Exception):
        if region is not None:
            region.cleanup()


# ---------------------------------------------------------------- cases


def cpu_transfer(cpu_bytes: int, block_tokens: int) -> dict[str, Any]:
    """kvtier's CPU-only rendering, for the geometry cases."""
    return sizing.kv_transfer_config(cpu_bytes, block_tokens, None)


def run_case(
    mc: Any, model: str, tp: int, kv_dtype: str, blocks: tuple[int, int], hybrid: bool | None
) -> dict[str, Any]:
    gpu_block, offload_block = blocks
    case: dict[str, Any] = {
        "id": f"{model}/tp{tp}/{kv_dtype}/gpu{gpu_block}-offload{offload_block}/"
        + {None: "hybrid-default", True: "hybrid-on", False: "hybrid-off"}[hybrid],
        "model": model,
        "tensorParallelSize": tp,
        "kvCacheDtype": kv_dtype,
        "gpuBlockSize": gpu_block,
        "offloadBlockSize": offload_block,
        "hybridRequested": hybrid,
    }
    try:
        vc = vllm_config(
            mc, tp, kv_dtype, gpu_block, hybrid, cpu_transfer(CPU_BYTES_TO_USE, offload_block)
        )
        case["hybridKVCacheManager"] = not vc.scheduler_config.disable_hybrid_kv_cache_manager
        case["useMLA"] = bool(mc.use_mla)
        case["kvHeadsPerRank"] = mc.get_num_kv_heads(vc.parallel_config)
        case["headSize"] = mc.get_head_size()
        case["attentionLayersVLLM"] = mc.get_num_layers_by_block_type(
            vc.parallel_config, "attention"
        )
        case["cacheDtype"] = str(_cache_torch_dtype(vc)).removeprefix("torch.")
        specs = layer_specs(vc)
        configs = kv_cache_configs(vc, specs)
        case["groups"] = group_summary(configs[0])
        spec = offloading_spec(vc, configs[0])
        summary = spec_summary(spec, configs[0])
        case["offload"] = summary
        case["cpuBytesToUse"] = CPU_BYTES_TO_USE
        case["contextBytes"] = {str(n): context_bytes(summary, n) for n in CONTEXTS}
    except Exception as exc:
        case["error"] = f"{type(exc).__name__}: {_first_line(exc)}"
        if os.environ.get("KVTIER_CONFORMANCE_DEBUG"):
            traceback.print_exc()
    return case


def rendered_configs(model: str, tp: int, root: str) -> list[tuple[str, dict[str, Any]]]:
    """What kvtier renders for each disk choice, at a small CPU tier (a real /dev/shm file)."""
    geometry = sizing.lookup_model(model)
    out = []
    for disk in ("None", "NVMe", "CephFS", "ObjectStore"):
        inp = sizing.SizingInput(
            geometry=geometry,
            average_context_tokens=50_000,
            tensor_parallel_size=tp,
            cpu_bytes=MANAGER_CPU_BYTES,
            disk_type=disk,
            available_disk_types=frozenset({"NVMe", "CephFS", "ObjectStore"}),
            fs_root_dir=os.path.join(root, disk.lower()),
            object_store_bucket="kvtier-conformance",
            object_store_endpoint="http://127.0.0.1:9",  # never contacted: the tier is built only
            vllm_version=vllm.__version__,
        )
        out.append((disk, sizing.plan(inp).kv_transfer_config))
    return out


def run_managers(mc: Any, model: str, tp: int) -> list[dict[str, Any]]:
    results = []
    root = tempfile.mkdtemp(prefix="kvtier-conformance-")
    try:
        for disk, transfer in rendered_configs(model, tp, root):
            shown = json.loads(json.dumps(transfer).replace(root, "<root>"))
            entry: dict[str, Any] = {
                "model": model,
                "tensorParallelSize": tp,
                "disk": disk,
                "kvTransferConfig": shown,
            }
            try:
                vc = vllm_config(mc, tp, "auto", 16, None, transfer)
                configs = kv_cache_configs(vc, layer_specs(vc))
                entry.update(build_manager(vc, configs[0]))
                entry.update(check_store_configs(transfer))
            except Exception as exc:
                entry.update(
                    {"builds": False, "error": f"{type(exc).__name__}: {_first_line(exc)}"}
                )
            if "error" in entry:
                entry["error"] = entry["error"].replace(root, "<root>")
            results.append(entry)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--expect-version", help="fail unless this vLLM release is imported")
    parser.add_argument("--models", help="comma-separated subset (debugging)")
    parser.add_argument(
        "--install-report", required=True, help="pip's install report of this virtualenv"
    )
    args = parser.parse_args()
    if args.expect_version and vllm.__version__ != args.expect_version:
        print(f"vLLM {vllm.__version__} imported, {args.expect_version} expected", file=sys.stderr)
        return 2
    logging.disable(logging.CRITICAL)  # vLLM logs what the harness records anyway
    started = time.monotonic()
    wanted = set(args.models.split(",")) if args.models else None
    cases: list[dict[str, Any]] = []
    managers: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    for item in catalog_models():
        if wanted and item["model"] not in wanted:
            continue
        with tempfile.TemporaryDirectory(prefix="kvtier-model-") as model_dir:
            config = dict(item["config"])
            # Weight quantization (fp8, mxfp4) does not change the KV cache, whose dtype
            # --kv-cache-dtype sets; vLLM checks its kernels for it, which need a GPU.
            dropped = config.pop("quantization_config", None)
            with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f)
            record: dict[str, Any] = {"model": item["model"], "configSource": item["configSource"]}
            if dropped is not None:
                record["droppedQuantization"] = dropped.get("quant_method")
            models.append(record)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    mc = model_config(model_dir, "auto")
            except Exception as exc:
                record["error"] = f"{type(exc).__name__}: {_first_line(exc)}".replace(
                    model_dir, "<model>"
                )
                continue
            record["architectures"] = list(getattr(mc.hf_config, "architectures", None) or [])
            if is_nas(mc):
                try:
                    record["vllmModel"] = nas_model_record(mc)
                except Exception as exc:  # the release cannot build it: pinned in the file
                    record["error"] = f"{type(exc).__name__}: {_first_line(exc)}"
                    if os.environ.get("KVTIER_CONFORMANCE_DEBUG"):
                        traceback.print_exc()
                    continue
            for tp in TP_SIZES:
                for kv_dtype in KV_DTYPES:
                    for blocks in BLOCKS:
                        for hybrid in (None, False):
                            case = run_case(mc, item["model"], tp, kv_dtype, blocks, hybrid)
                            if "error" in case:
                                case["error"] = case["error"].replace(model_dir, "<model>")
                            cases.append(case)
                managers.extend(run_managers(mc, item["model"], tp))
        print(f"{item['model']}: done ({time.monotonic() - started:.0f}s)", file=sys.stderr)
    document = {
        "provenance": {
            "vllm": vllm.__version__,
            "torch": _version("torch"),
            "transformers": _version("transformers"),
            "python": platform.python_version(),
            "platform": EMULATED_PLATFORM,
            "stubbedModules": sorted(set(STUBBED)),
            "stubbedKernelOps": sorted(STUBBED_OPS),
            "command": "hack/conformance/run (harness: hack/conformance/harness.py)",
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.monotonic() - started),
        },
        "settings": {
            "cpuBytesToUse": CPU_BYTES_TO_USE,
            "contexts": list(CONTEXTS),
            "managerCPUBytes": MANAGER_CPU_BYTES,
            "maxModelLen": MAX_MODEL_LEN,
            "distributedExecutorBackend": "mp",
        },
        "models": models,
        "cases": cases,
        "managers": managers,
    }
    golden_provenance.seal(document, pathlib.Path(REPO), "vllm", pathlib.Path(args.install_report))
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1, sort_keys=False)
        f.write("\n")
    return 0


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
