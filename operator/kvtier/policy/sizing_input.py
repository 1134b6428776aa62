"""A KVCacheTier's spec, its effective settings and the cluster's facts as one SizingInput:
the model's config.json, the disk tiers the cluster can offer, and the prefill vLLM measured."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.tier import ConditionType, KVCacheTierSpec, ValueSource
from kvtier.policy.conditions import FALSE, Verdict
from kvtier.policy.contract import Facts
from kvtier.policy.kv_cache_dtype import kv_cache_dtype_to_size
from kvtier.policy.observed_health import measured_prefill
from kvtier.policy.placement import Placement
from kvtier.policy.refusals import SPEC_PATHS, sized_false
from kvtier.settings import BUILTIN_DEFAULTS, EffectiveSettings
from kvtier.sizing import SizingError, SizingInput, record, resolve_geometry
from kvtier.sizing.releases import vllm_release
from kvtier.targets.facts import TargetFacts
from kvtier.tiers.registry import available_disks as offered

MAX_CONFIG_BYTES = 1024 * 1024  # a real config.json is a few KiB; refuse what cannot be one


def _config_json(spec: KVCacheTierSpec, config_map: Mapping[str, Any] | None) -> dict[str, Any]:
    ref = spec.model.config_map_ref if spec.model else None
    assert ref is not None
    where = f"ConfigMap {ref.name} key {ref.key}"
    if config_map is None:
        raise sized_false("ConfigMapNotFound", f"spec.model.configMapRef: {where} not found")
    text = (config_map.get("data") or {}).get(ref.key)
    if text is None:
        raise sized_false("ConfigMapKeyMissing", f"spec.model.configMapRef: {where} is missing")
    if len(text) > MAX_CONFIG_BYTES:
        raise sized_false(
            "InvalidModelConfig",
            f"spec.model.configMapRef: {where} is {len(text)} bytes; a config.json is at most "
            f"{MAX_CONFIG_BYTES}",
        )
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise sized_false(
            "InvalidModelConfig", f"spec.model.configMapRef: {where} is not JSON: {exc}"
        ) from None
    if not isinstance(parsed, dict):
        raise sized_false(
            "InvalidModelConfig", f"spec.model.configMapRef: {where} is not a JSON object"
        )
    return parsed


def sizing_input(
    spec: KVCacheTierSpec,
    eff: EffectiveSettings,
    target: TargetFacts,
    place: Placement,
    config_map: Mapping[str, Any] | None,
    available: frozenset[str],
    probes: Mapping[str, Mapping[str, Any]],
) -> SizingInput:
    model = spec.model
    geometry = None
    if model and model.geometry:
        g = model.geometry
        if g.attention_layers is not None and g.kv_heads is not None and g.head_dim is not None:
            geometry = (g.attention_layers, g.kv_heads, g.head_dim)
    config = _config_json(spec, config_map) if model and model.config_map_ref else None
    name = (model.name if model else None) or target.model_name
    try:
        try:
            geo = resolve_geometry(model=name, config=config, geometry=geometry)
        except SizingError as exc:
            # A full explicit geometry needs no catalog entry for the target's model name.
            if exc.field != "model" or geometry is None or (model and model.name):
                raise
            geo = resolve_geometry(model=None, config=config, geometry=geometry)
    except SizingError as exc:
        reason = "ModelUnknown" if exc.field == "model" else "InvalidModelConfig"
        raise sized_false(
            reason, f"{SPEC_PATHS.get(exc.field, 'spec.model')}: {exc.message}"
        ) from None
    tp = (
        (model.tensor_parallel_size if model else None)
        or target.tensor_parallel_size
        or target.gpus_per_pod
        or 1
    )
    cpu = eff.cpu_size.value
    disk = spec.disk
    flags = target.server
    store = disk.object_store if disk else None
    version = eff.vllm_version
    try:
        vllm_release(version.value)
    except SizingError as exc:
        where = (
            f"the target's image is vLLM {version.value}"
            if version.source is ValueSource.TARGET
            else f"{SPEC_PATHS['vllmVersion']}: {version.value}"
        )
        raise sized_false(
            "UnsupportedVLLMVersion",
            f"{where}: {exc.message}; set spec.model.vllmVersion to the release it behaves as",
        ) from None
    return SizingInput(
        geometry=geo,
        average_context_tokens=spec.workload.average_context_tokens,
        concurrent_sessions=spec.workload.concurrent_sessions,
        replicas=target.replicas,
        tensor_parallel_size=tp,
        kv_cache_dtype=kv_cache_dtype_to_size(eff, flags, geo.model_dtype),
        block_tokens=eff.block_size_tokens.value,
        gpu_block_tokens=flags.gpu_block_tokens or BUILTIN_DEFAULTS.block_size_tokens,
        vllm_version=version.value,
        hybrid_kv_cache_manager=flags.hybrid_kv_cache_manager is not False,
        data_parallel_size=flags.data_parallel_size_local or flags.data_parallel_size or 1,
        distributed_executor_backend=flags.distributed_executor_backend or "mp",
        pipeline_parallel_size=flags.pipeline_parallel_size or 1,
        max_model_len=flags.max_model_len,
        cpu_bytes=None if cpu == "auto" else quantity_bytes(cpu),
        node_memory_bytes=place.node_memory_bytes,
        model_server_pods_per_node=place.pods_per_node,
        max_node_memory_fraction=eff.max_node_memory_fraction.value,
        memory_overhead_factor=eff.memory_overhead_factor.value,
        headroom_bytes=eff.memory_headroom_bytes.value,
        disk_type=eff.disk_type.value.value,
        available_disk_types=available,
        baseline_ttft_seconds=spec.probe.baseline_ttft_seconds if spec.probe else None,
        probe_runtime_seconds=eff.probe_runtime_seconds.value,
        tier_p99_seconds={d: float(p["p99Seconds"]) for d, p in probes.items()},
        tier_bandwidth_bytes_per_second={
            d: float(p["bandwidthBytesPerSecond"])
            for d, p in probes.items()
            if p.get("bandwidthBytesPerSecond")
        },
        object_store_bucket=store.bucket if store else None,
        object_store_endpoint=store.endpoint if store else None,
    )


def available_disks(
    spec: KVCacheTierSpec,
    eff: EffectiveSettings,
    nodes: Sequence[Mapping[str, Any]],
    place: Placement,
) -> frozenset[str]:
    """The disk types the cluster offers the tier: each type's module says (kvtier.tiers)."""
    return offered(spec, eff, nodes, frozenset(place.eligible_nodes))


def with_measured_prefill(inp: SizingInput, spec: KVCacheTierSpec, facts: Facts) -> SizingInput:
    measured = measured_prefill(spec, facts)
    if measured is None or inp.prefill_seconds_per_token is not None:
        return inp
    return record.replace(inp, prefill_seconds_per_token=measured)


def assumed_release(eff: EffectiveSettings) -> str:
    """What the Sized message says when the vLLM release was assumed, not known: neither the
    tier names one nor the target's image (an image whose tag is not vLLM's, a runtime without
    opendatahub.io/runtime-version); "" when it is known."""
    version = eff.vllm_version
    if version.source in (ValueSource.TIER, ValueSource.TARGET):
        return ""
    whose = "the policy's default" if version.source is ValueSource.POLICY else "kvtier's default"
    return (
        f"; vLLM {version.value} assumed ({whose}): the target's image names no release, pin "
        "it with spec.model.vllmVersion"
    )


def context_beyond_max_model_len(inp: SizingInput) -> Verdict | None:
    """An average context the server refuses to hold: vLLM rejects a request longer than its
    --max-model-len, so sizing for it would claim memory and storage no session ever fills."""
    limit, tokens = inp.max_model_len, inp.average_context_tokens
    if limit is None or tokens <= limit:
        return None
    return Verdict(
        ConditionType.SIZED.value,
        FALSE,
        "ContextExceedsMaxModelLen",
        f"spec.workload.averageContextTokens {tokens} exceeds the target's --max-model-len "
        f"{limit}: vLLM refuses longer requests, so no session holds that many tokens; set "
        f"spec.workload.averageContextTokens to at most {limit} (the prompt plus output of an "
        "average session), or raise the target's --max-model-len",
    )
