"""The roles of an LLMInferenceService as rendering needs them: what each role's pods get."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtier.sizing.vllm import kv_transfer_config_arg

DECODE = "decode"
PREFILL = "prefill"


@dataclass(frozen=True)
class RoleOffload:
    """What one role's vLLM pods need (decode: spec.template and spec.worker; prefill:
    spec.prefill), sized by the role's own replicas and parallelism. `templates` are the pod
    templates that run the role's vLLM, as dotted paths under spec; each gets the per-pod
    memory and /dev/shm."""

    role: str
    templates: tuple[str, ...]
    kv_transfer_config: Mapping[str, Any]
    cpu_bytes: int  # cpu_bytes_to_use of one vLLM engine
    pod_memory_bytes: int
    shm_bytes: int | None  # None: the release keeps the CPU tier out of /dev/shm
    bytes_per_token: int  # server-wide, for the scheduler's block count
    endpoint_cpu_bytes: int  # the CPU tier behind one router endpoint (one replica)

    @property
    def arg(self) -> str:
        return kv_transfer_config_arg(self.kv_transfer_config)
