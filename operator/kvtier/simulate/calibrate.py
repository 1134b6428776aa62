"""A simulation of a real tier: its KVCacheTier's spec and what the operator measured.

`from_tier` maps the object onto a SimConfig and says where each input came from: measured
(the storage probe's p99 and bandwidth, vLLM's own t_prefill), the spec (model, parallelism,
workload), sized by the operator (the tiers' capacities), or assumed (a SimConfig default).
The observed hit ratios are kept beside the run, to compare with the simulated ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvtier.api.tier import KVCacheTier, TierStatus
from kvtier.simulate.config import STUDY_CEPHFS, STUDY_NVME, DiskTier, SimConfig, Workload
from kvtier.simulate.models import MODEL_PARAMETERS
from kvtier.sizing import SizingError, find_model, normalize_disk_type

MEASURED = "measured"
SPEC = "spec"
SIZED = "sized"
ASSUMED = "assumed"


@dataclass(frozen=True)
class Input:
    name: str
    value: str
    source: str  # measured | spec | sized | assumed
    where: str  # the status or spec field, or why it is assumed

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "value": self.value, "source": self.source, "from": self.where}


@dataclass(frozen=True)
class Calibration:
    config: SimConfig
    inputs: tuple[Input, ...]
    observed: dict[str, float]  # vLLM's figures over the operator's last window

    def assumed(self) -> list[str]:
        return [i.name for i in self.inputs if i.source == ASSUMED]


def from_tier(tier: KVCacheTier, base: SimConfig, ref: str) -> Calibration:
    """`base` with every figure `tier` knows put in; SizingError naming `--tier` if the
    object cannot be simulated (no model it can size, no workload)."""
    spec, status = tier.spec, tier.status
    inputs: list[Input] = []
    changes: dict[str, object] = {}
    name = spec.model.name if spec.model else None
    if not name:
        raise SizingError("--tier", f"{ref} has no spec.model.name to simulate")
    model = find_model(name).id
    known = MODEL_PARAMETERS.get(model)
    if known is None:
        raise SizingError("--tier", f"{ref}: the parameters of {model} are not known; add --params")
    changes.update(
        model=model,
        parameters=known.total,
        active_parameters=known.active,
        experts=known.experts,
        experts_per_token=known.experts_per_token,
        query_heads=None,
    )
    inputs.append(Input("model", model, SPEC, "spec.model.name"))
    tp = spec.model.tensor_parallel_size if spec.model else None
    if tp:
        changes["tensor_parallel_size"] = tp
        inputs.append(Input("tensor parallel size", str(tp), SPEC, "spec.model"))
    else:
        inputs.append(Input("tensor parallel size", str(base.tensor_parallel_size), ASSUMED, ""))
    if spec.model and spec.model.kv_cache_dtype:
        changes["kv_cache_dtype"] = str(spec.model.kv_cache_dtype)
    if spec.model and spec.model.block_size_tokens:
        changes["block_tokens"] = spec.model.block_size_tokens
    w = spec.workload
    changes["workload"] = dataclasses.replace(
        Workload(),
        sessions=w.concurrent_sessions,
        average_context_tokens=w.average_context_tokens,
        system_prompt_tokens=min(Workload().system_prompt_tokens, w.average_context_tokens // 4),
    )
    inputs.append(
        Input(
            "workload",
            f"{w.concurrent_sessions} sessions, {w.average_context_tokens:,}-token contexts",
            SPEC,
            "spec.workload",
        )
    )
    tiers = {t.name: t for t in (status.tiers or [])} if status else {}
    cpu = tiers.get("cpu")
    if cpu and cpu.capacity_bytes:
        changes["cpu_bytes"] = cpu.capacity_bytes
        inputs.append(Input("CPU tier", f"{cpu.capacity_bytes:,} B", SIZED, "tiers[cpu]"))
    else:
        changes["cpu_bytes"] = None
        inputs.append(Input("CPU tier", "kvtier's auto size", ASSUMED, "no tiers[cpu]"))
    disk_name = status.disk_tier if status else None
    disk = tiers.get(disk_name) if disk_name else None
    changes["disk"] = _disk(disk, inputs) if disk else None
    if disk is None:
        changes["scenarios"] = ("none", "cpu")
    observed = status.observed if status else None
    t_prefill = observed.measured_t_prefill_seconds if observed else None
    if t_prefill:
        changes["prefill_tokens_per_second"] = 1 / t_prefill
        inputs.append(
            Input(
                "prefill",
                f"{1 / t_prefill:,.0f} tokens/s",
                MEASURED,
                "observed.measuredTPrefillSeconds",
            )
        )
    else:
        inputs.append(Input("prefill", "from FLOPs", ASSUMED, "no measured t_prefill"))
    inputs.append(Input("GPU", base.gpu.name, ASSUMED, "the simulator's GPU profile"))
    figures: dict[str, float] = {}
    if observed:
        if observed.external_hit_ratio is not None:
            figures["externalHitRatio"] = observed.external_hit_ratio
        if observed.prompt_tokens and observed.tokens_local_hit is not None:
            figures["gpuHitRatio"] = observed.tokens_local_hit / observed.prompt_tokens
        if observed.prompt_tokens and observed.tokens_from_offload is not None:
            figures["offloadHitRatio"] = observed.tokens_from_offload / observed.prompt_tokens
    config = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    return Calibration(config, tuple(inputs), figures)


def _disk(tier: TierStatus, inputs: list[Input]) -> DiskTier:
    kind = normalize_disk_type(tier.name, "--tier")
    disk = STUDY_CEPHFS if kind == "CephFS" else dataclasses.replace(STUDY_NVME, kind=kind)
    probe = tier.probe
    where = f"tiers[{tier.name}].probe"
    if probe and probe.p99_seconds:
        disk = dataclasses.replace(disk, p99_seconds=probe.p99_seconds)
        inputs.append(Input(f"{kind} p99", f"{probe.p99_seconds:g} s", MEASURED, where))
    else:
        inputs.append(Input(f"{kind} p99", f"{disk.p99_seconds:g} s", ASSUMED, "not probed"))
    if probe and probe.bandwidth_bytes_per_second:
        disk = dataclasses.replace(
            disk, bandwidth_bytes_per_second=probe.bandwidth_bytes_per_second
        )
        inputs.append(
            Input(
                f"{kind} bandwidth",
                f"{probe.bandwidth_bytes_per_second / 1e6:,.0f} MB/s",
                MEASURED,
                where,
            )
        )
    else:
        inputs.append(
            Input(
                f"{kind} bandwidth",
                f"{disk.bandwidth_bytes_per_second / 1e6:,.0f} MB/s",
                ASSUMED,
                "not probed",
            )
        )
    if tier.capacity_bytes:
        disk = dataclasses.replace(disk, capacity_bytes=tier.capacity_bytes)
        inputs.append(Input(f"{kind} capacity", f"{tier.capacity_bytes:,} B", SIZED, tier.name))
    return disk
