"""What a model server needs for its tiers, from the sizing plan: the input of every target
kind's writes (render/writes.py builds it from the sizing plan and what the disk tier's
module provisions, kvtier.tiers, and the kind modules read it).

An LLMInferenceService has roles (decode: spec.template and spec.worker; prefill:
spec.prefill), each sized on its own (policy/roles.py); an InferenceService has one pod
template, which gets the tier's own figures.

The CPU tier's bytes have one carrier, RoleOffload.cpu_bytes (from Sizing.cpu_bytes_to_use):
the --kv-transfer-config is written from it and the connector's other settings where a kind
writes the flag, and the native field's `cpu` from it alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvtier.render.evictor import EvictorSettings
from kvtier.sizing.vllm import ConnectorSettings, kv_transfer_config_arg
from kvtier.tiers.base import Claim  # the tier types' claims: Offload.disk holds one

DECODE = "decode"
PREFILL = "prefill"
DTYPE_FLAG = "--kv-cache-dtype"


@dataclass(frozen=True)
class RoleOffload:
    """What one role's vLLM pods need (decode: spec.template and spec.worker; prefill:
    spec.prefill), sized by the role's own replicas and parallelism. `templates` are the pod
    templates that run the role's vLLM, as dotted paths under spec; each gets the per-pod
    memory and /dev/shm."""

    role: str
    templates: tuple[str, ...]
    connector: ConnectorSettings  # the role's vLLM config but its CPU tier's bytes
    cpu_bytes: int  # cpu_bytes_to_use of one vLLM engine
    pod_memory_bytes: int
    shm_bytes: int | None  # None: the release keeps the CPU tier out of /dev/shm
    bytes_per_token: int  # server-wide, for the scheduler's block count; 0: not known
    endpoint_cpu_bytes: int  # the CPU tier behind one router endpoint (one replica)

    @property
    def kv_transfer_config(self) -> dict[str, Any]:
        return self.connector.kv_transfer_config(self.cpu_bytes)

    @property
    def arg(self) -> str:
        return kv_transfer_config_arg(self.kv_transfer_config)


def plan_offload(
    connector: ConnectorSettings, cpu_bytes: int, pod_memory_bytes: int, shm_bytes: int | None
) -> RoleOffload:
    """The tier's own plan as one pod template gets it (spec.template, an InferenceService's
    predictor): decode, without the router's figures (no scheduler capacity is written)."""
    return RoleOffload(
        DECODE, ("template",), connector, cpu_bytes, pod_memory_bytes, shm_bytes, 0, cpu_bytes
    )


@dataclass(frozen=True)
class Offload:
    """What the model server needs for its tiers, from the sizing plan. `plan` is the tier's
    own plan (plan_offload): an InferenceService's only pod template, the figures the
    summary names; `roles` lists every role of an LLMInferenceService when known (else
    `plan` is decode on spec.template alone)."""

    plan: RoleOffload
    disk: Claim | None = None  # what the disk tier's module gives the pods to mount
    disk_label: str | None = None  # the disk tier's type ("NVMe"), for the summary
    eviction_policy: str = "lru"
    mount_path: str = "/mnt/kv-cache"
    python_hash_seed: str | None = None  # set when replicas share a disk tier
    roles: tuple[RoleOffload, ...] = ()
    # The release leaves its /dev/shm offload file behind after an OOMKill: remove it first.
    clear_stale_shm_file: bool = False
    # A per-pod disk tier's evictor: a native sidecar beside vLLM on the same volume.
    evictor: EvictorSettings | None = None
    # The --kv-cache-dtype the tier is sized for, passed where the target passes none.
    kv_cache_dtype: str | None = None
    # An obj tier's credentials: the Secret (the user's, in the target's namespace) whose
    # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY the vLLM container gets by reference.
    object_store_secret: str | None = None

    @property
    def dtype_args(self) -> list[str]:
        return [DTYPE_FLAG, self.kv_cache_dtype] if self.kv_cache_dtype else []

    @property
    def arg(self) -> str:
        return self.plan.arg

    def role_offloads(self) -> tuple[RoleOffload, ...]:
        return self.roles or (self.plan,)
