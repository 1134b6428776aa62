"""What a model server's vLLM command line says about its KV cache, and which vLLM it runs.

Pure functions over one container (a dict as the API returns it): its args, its
VLLM_ADDITIONAL_ARGS (KServe's llm-d runtime appends them to vLLM's command) and its image.
Only what changes the CPU tier is read (docs/sizing.md, "How vLLM lays the CPU tier out").
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ADDITIONAL_ARGS_ENV = "VLLM_ADDITIONAL_ARGS"
# Upstream images whose tag is the vLLM version (vllm/vllm-openai:v0.33.0, .../vllm:0.24.0).
_VLLM_IMAGE = re.compile(r"(^|/)vllm(-openai)?(-[a-z0-9]+)?:v?(?P<version>[0-9]+\.[0-9]+[^@]*)")
_SIZE_SUFFIX = {"k": 1_000, "K": 1_024, "m": 1_000_000, "M": 1_048_576}


@dataclass(frozen=True)
class ServerFlags:
    """The flags of a vLLM command line that size or place the CPU tier (None: not given)."""

    gpu_block_tokens: int | None = None  # --block-size
    kv_cache_dtype: str | None = None  # --kv-cache-dtype
    hybrid_kv_cache_manager: bool | None = None  # False: --disable-hybrid-kv-cache-manager
    data_parallel_size: int | None = None  # --data-parallel-size
    data_parallel_size_local: int | None = None  # --data-parallel-size-local
    pipeline_parallel_size: int | None = None  # --pipeline-parallel-size
    distributed_executor_backend: str | None = None  # --distributed-executor-backend
    max_model_len: int | None = None  # --max-model-len
    image_vllm_version: str | None = None  # from the image tag of an upstream vLLM image


def _value(args: Sequence[str], *names: str) -> str | None:
    """The last value of `--flag VALUE` or `--flag=VALUE` (vLLM's argparse keeps the last)."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
    return found


def _switch(args: Sequence[str], name: str) -> bool | None:
    """A store_true flag (`--x`, `--x=true|false`), or its `--no-x` form."""
    found = None
    for arg in args:
        if arg == name:
            found = True
        elif arg == "--no-" + name[2:]:
            found = False
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1].strip().lower() in ("1", "true", "yes")
    return found


def _int(text: str | None) -> int | None:
    """A positive count; vLLM also takes 32k / 1K style lengths for --max-model-len."""
    if text is None:
        return None
    text = text.strip()
    multiplier = _SIZE_SUFFIX.get(text[-1:], 1) if text else 1
    digits = text[:-1] if multiplier != 1 else text
    if not digits.isdigit() or int(digits) <= 0:
        return None
    return int(digits) * multiplier


def container_args(container: Mapping[str, Any]) -> list[str]:
    """The container's args followed by the words of VLLM_ADDITIONAL_ARGS (a literal value)."""
    args = [str(a) for a in container.get("args") or [] if isinstance(a, str | int)]
    for entry in container.get("env") or []:
        if isinstance(entry, Mapping) and entry.get("name") == ADDITIONAL_ARGS_ENV:
            # An unbalanced quote: vLLM's own shell would fail on it too.
            with contextlib.suppress(ValueError):
                args += shlex.split(str(entry.get("value") or ""))
    return args


def image_vllm_version(image: object) -> str | None:
    """The vLLM version an upstream vLLM image's tag names, else None (a vendor image's tag
    is its own product version, not vLLM's)."""
    if not isinstance(image, str):
        return None
    match = _VLLM_IMAGE.search(image)
    return match.group("version") if match else None


def server_flags(container: Mapping[str, Any]) -> ServerFlags:
    """The CPU-tier flags of one vLLM container."""
    args = container_args(container)
    dtype = _value(args, "--kv-cache-dtype")
    backend = _value(args, "--distributed-executor-backend")
    return ServerFlags(
        gpu_block_tokens=_int(_value(args, "--block-size")),
        kv_cache_dtype=dtype.strip().lower() if dtype else None,
        hybrid_kv_cache_manager=(
            None if (off := _switch(args, "--disable-hybrid-kv-cache-manager")) is None else not off
        ),
        data_parallel_size=_int(_value(args, "--data-parallel-size", "-dp")),
        data_parallel_size_local=_int(_value(args, "--data-parallel-size-local", "-dpl")),
        pipeline_parallel_size=_int(_value(args, "--pipeline-parallel-size", "-pp")),
        distributed_executor_backend=backend.strip() if backend else None,
        max_model_len=_int(_value(args, "--max-model-len")),
        image_vllm_version=image_vllm_version(container.get("image")),
    )
