"""Per-role sizing of an LLMInferenceService: decode and prefill, single- and multi-node.

Each role (targets/facts.py RoleFacts) is sized on its own: its replicas and parallelism
decide how many vLLM engines share the sessions, what one engine's CPU tier is
(`cpu_bytes_to_use`, vLLM's total over the engine's TP × PP workers) and what one pod holds:

- data parallelism: every data-parallel rank is an engine with a CPU tier of its own; a pod
  runs `engines_per_pod` of them (dataLocal on a LeaderWorkerSet, data on one node), which
  the sizing counts as its data_parallel_size;
- pipeline parallelism across nodes (spec.worker without data parallelism): an engine spreads
  over `pipeline` pods, and each holds its stage's share of the tier (1/pipeline, rounded up);
- otherwise one engine per pod.

Memory and /dev/shm per pod follow the sizing's rule for one pod (overhead × the pod's share
+ headroom; the share + headroom), so every pod template that runs vLLM holds its tier. The
prefill role gets a CPU tier only: the disk tier is provisioned per decode pod (or shared by
decode replicas) and is the decode role's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kvtier.policy.placement import placement
from kvtier.policy.plan_cache import planned
from kvtier.render.scheduler import DEFAULT_BLOCK_TOKENS, blocks
from kvtier.sizing import SizingInput, SizingPlan, record
from kvtier.targets.facts import RoleFacts
from kvtier.targets.offload import DECODE, RoleOffload


def role_input(inp: SizingInput, role: RoleFacts, tensor: int | None = None) -> SizingInput:
    """The sizing input of one role: its engines share the sessions; the node-memory cap is
    per engine (a pod's share over its engines, or times the pods a pipelined engine spans)."""
    pods = role.pods_per_replica if role.data_parallel else 1
    # Without spec.parallelism.data the decode container's own --data-parallel-size flags
    # (already in `inp`) still count; prefill has none of decode's.
    engines = role.engines_per_pod if role.data_parallel else inp.data_parallel_size
    if role.role != DECODE and not role.data_parallel:
        engines = 1
    changes: dict[str, Any] = {
        "replicas": role.replicas * pods,
        "data_parallel_size": engines,
        "model_server_pods_per_node": inp.model_server_pods_per_node * role.engines_per_pod,
    }
    if tensor is not None:
        changes["tensor_parallel_size"] = tensor
    if inp.node_memory_bytes is not None and role.stages_per_pod > 1:
        changes["node_memory_bytes"] = inp.node_memory_bytes * role.stages_per_pod
    return record.replace(inp, **changes)


@dataclass(frozen=True)
class RolePlan:
    """One role's sizing and what each of its pods needs."""

    facts: RoleFacts
    plan: SizingPlan

    @property
    def cpu_bytes_per_pod(self) -> int:
        cpu = self.plan.sizing.cpu_bytes_to_use
        if self.facts.stages_per_pod > 1:
            return -(-cpu // self.facts.stages_per_pod)
        return cpu * self.engines_per_pod

    @property
    def pod_memory_bytes(self) -> int:
        if self.facts.stages_per_pod == 1:
            return self.plan.sizing.pod_memory_bytes  # already times the pod's engines
        inp = self.plan.input
        share = Decimal(self.cpu_bytes_per_pod) * Decimal(str(inp.memory_overhead_factor))
        return math.ceil(share) + inp.headroom_bytes

    @property
    def shm_bytes(self) -> int | None:
        """None where the vLLM release keeps the CPU tier out of /dev/shm."""
        if self.facts.stages_per_pod == 1 or self.plan.sizing.shm_bytes is None:
            return self.plan.sizing.shm_bytes
        return self.cpu_bytes_per_pod + self.plan.input.headroom_bytes

    @property
    def bytes_per_token_per_rank(self) -> int:
        """Per GPU rank: a pipeline stage holds its share of the layers (the largest stage)."""
        return -(-self.plan.sizing.bytes_per_token_per_rank // self.facts.pipeline)

    @property
    def engines_per_pod(self) -> int:
        return self.plan.input.data_parallel_size

    @property
    def endpoint_cpu_bytes(self) -> int:
        """The CPU tier behind one router endpoint: KServe's InferencePool selects one pod per
        replica (the leader of a LeaderWorkerSet group), which fronts all its engines."""
        pods = self.facts.pods_per_replica if self.facts.data_parallel else 1
        return self.plan.sizing.cpu_bytes_to_use * self.engines_per_pod * pods

    def offload(self) -> RoleOffload:
        return RoleOffload(
            role=self.facts.role,
            templates=self.facts.templates,
            connector=self.plan.connector,
            cpu_bytes=self.plan.sizing.cpu_bytes_to_use,
            pod_memory_bytes=self.pod_memory_bytes,
            shm_bytes=self.shm_bytes,
            bytes_per_token=self.plan.sizing.bytes_per_token,
            endpoint_cpu_bytes=self.endpoint_cpu_bytes,
        )

    def status(self) -> dict[str, Any]:
        """status.plan.roles[] (RolePlan shape, camelCase)."""
        f, s = self.facts, self.plan.sizing
        return {
            "role": f.role,
            "templates": [f"spec.{t}" for t in f.templates],
            "replicas": f.replicas,
            "tensor": self.plan.input.tensor_parallel_size,
            "pipeline": f.pipeline,
            "data": f.data,
            "dataLocal": f.data_local,
            "podsPerReplica": f.pods_per_replica,
            "enginesPerPod": self.engines_per_pod,
            "bytesPerTokenPerRank": self.bytes_per_token_per_rank,
            "cpuBytesToUse": s.cpu_bytes_to_use,
            "cpuBytesPerPod": self.cpu_bytes_per_pod,
            "cpuTierBlocks": blocks(s.cpu_bytes_to_use, s.bytes_per_token, self.block_tokens),
            "podMemoryBytes": self.pod_memory_bytes,
            "shmBytes": self.shm_bytes,
            "topology": s.topology,
        }

    @property
    def block_tokens(self) -> int:
        return self.plan.input.block_tokens or DEFAULT_BLOCK_TOKENS


def role_plans(
    base: SizingInput,
    decode_plan: SizingPlan,
    roles: tuple[RoleFacts, ...],
    nodes: Sequence[Mapping[str, Any]] = (),
) -> list[RolePlan]:
    """Every role's plan. Decode's is the tier's own plan (planned from role_input(base,
    decode)); prefill is planned from `base` (the tier's input before any role) with its own
    replicas, parallelism and placement (its pods' GPUs and node selector over `nodes`), CPU
    tier only. SizingError when a role cannot be sized."""
    out: list[RolePlan] = []
    for role in roles:
        if role.role == DECODE:
            out.append(RolePlan(role, decode_plan))
            continue
        tensor = role.tensor or 1
        if nodes:
            place = placement(nodes, role.node_selector, role.gpus_per_pod or tensor)
            base = record.replace(
                base,
                model_server_pods_per_node=place.pods_per_node,
                node_memory_bytes=place.node_memory_bytes or base.node_memory_bytes,
            )
        inp = record.replace(role_input(base, role, tensor), disk_type="None")
        out.append(RolePlan(role, planned(inp)))
    return out
