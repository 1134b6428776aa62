"""The llm-d scheduler's CPU-tier prefix scorer kept in step with the tier: its capacity in the
scorer's blocks, the user's other plugins untouched, unknown formats reported, and the user's
values given back with the tier."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.render.picker_version import VERSION_UNKNOWN_REASON, picker_layout
from kvtier.render.scheduler import (
    CPU_SCORER,
    DROPPED_REASON,
    UNKNOWN_CONFIG_REASON,
    SchedulerProblem,
    SchedulerSync,
    config_ref,
    scheduler_sync,
)
from kvtier.sizing import ConnectorSettings
from kvtier.targets.offload import Offload, RoleOffload, plan_offload
from kvtier.targets.registry import target_kind, target_patch, unapply_writes

GiB = 1 << 30
PER_TOKEN = 262_144  # Qwen3-32B, 16-bit KV, whole server
CONNECTOR = ConnectorSettings(16)


def sync_of(
    obj: dict[str, Any], roles: list[RoleOffload]
) -> SchedulerSync | SchedulerProblem | None:
    """scheduler_sync with no record yet, for the picker version KServe merges from the
    target alone (no LLMInferenceServiceConfigs: its own annotation decides)."""
    return scheduler_sync(obj, roles, {}, picker_layout(obj, {}))


def scheduler_of(obj: dict[str, Any], offload: Offload) -> SchedulerSync | SchedulerProblem | None:
    """The target kind's scheduler, the picker's version resolved as in sync_of."""
    return target_kind(obj).scheduler(obj, offload, picker_layout(obj, {}))


def _role(role: str, cpu: int, templates: tuple[str, ...] = ("template",)) -> RoleOffload:
    return RoleOffload(role, templates, CONNECTOR, cpu, 2 * cpu, cpu, PER_TOKEN, cpu)


DECODE = _role("decode", 100 * GiB)
PREFILL = _role("prefill", 40 * GiB, ("prefill.template",))


def epp_config(parameters: dict[str, Any] | None = None, pd: bool = False) -> dict[str, Any]:
    """llm-d's tiered-prefix-cache EndpointPickerConfig: a GPU and a CPU prefix scorer."""
    cpu: dict[str, Any] = {"type": "prefix-cache-scorer", "name": CPU_SCORER}
    cpu["parameters"] = (
        {"autoTune": False, "lruCapacityPerServer": 41000} if parameters is None else parameters
    )
    profile = [
        {"pluginRef": "queue-scorer", "weight": 2},
        {"pluginRef": "gpu-prefix-cache-scorer", "weight": 1},
        {"pluginRef": CPU_SCORER, "weight": 1},
    ]
    profiles = [{"name": "default", "plugins": profile}]
    if pd:
        profiles = [{"name": "prefill", "plugins": profile}, {"name": "decode", "plugins": profile}]
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "prefix-cache-scorer", "name": "gpu-prefix-cache-scorer"},
            cpu,
        ],
        "schedulingProfiles": profiles,
    }


def target(config: dict[str, Any] | None = None, pd: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"uri": "hf://Qwen/Qwen3-32B"},
        "template": {"containers": [{"name": "main", "image": "vllm"}]},
        "router": {
            "scheduler": {
                # A picker that reads the scorer's parameters (KServe drops them from 0.9.0).
                "annotations": {"app.kubernetes.io/version": "0.8.0"},
                "config": {"inline": config or epp_config(pd=pd)},
            }
        },
    }
    if pd:
        spec["prefill"] = {"template": {"containers": [{"name": "main", "image": "vllm"}]}}
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": spec,
    }


def _offload(*roles: RoleOffload) -> Offload:
    own = plan_offload(CONNECTOR, DECODE.cpu_bytes, 2 * DECODE.cpu_bytes, DECODE.cpu_bytes)
    return Offload(own, roles=roles)


def _cpu_plugin(obj: dict[str, Any]) -> dict[str, Any]:
    plugins = obj["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    found: dict[str, Any] = next(p for p in plugins if p.get("name") == CPU_SCORER)
    return found


def _apply_as(obj: dict[str, Any], offload: Offload, scheduler: Any) -> dict[str, Any]:
    """The target after the writes for a given scheduler outcome: the apply's record (its
    annotation replacing kvtier's old one), then the JSON patches."""
    writes = target_patch(obj, offload, scheduler)
    assert isinstance(writes, list)
    out = copy.deepcopy(obj)
    for w in writes:
        if w.action == "Patch":
            out = jsonpatch.apply_patch(out, w.body["jsonPatch"])
        else:
            annotations = w.body["metadata"]["annotations"]
            out["metadata"].setdefault("annotations", {}).update(annotations)
    return out


def _apply(obj: dict[str, Any], offload: Offload) -> dict[str, Any]:
    """The target after kvtier's writes: the record of the apply, then the JSON patch."""
    return _apply_as(obj, offload, scheduler_of(obj, offload))


def test_capacity_is_the_tiers_blocks_in_the_scorers_unit() -> None:
    sync = sync_of(target(), [DECODE])
    assert isinstance(sync, SchedulerSync)
    assert sync.capacity == 100 * GiB // (16 * PER_TOKEN) == 25600
    assert sync.status() == {
        "plugin": CPU_SCORER,
        "blockSizeTokens": 16,
        "lruCapacityPerServer": 25600,
        "roles": ["decode"],
    }  # no configMap: the config is inline
    # A scorer that hashes 64-token blocks indexes a quarter as many.
    coarse = target(epp_config({"blockSizeTokens": 64, "lruCapacityPerServer": 1}))
    sync = sync_of(coarse, [DECODE])
    assert isinstance(sync, SchedulerSync) and sync.capacity == 6400


def test_the_patch_changes_only_the_cpu_scorers_two_parameters() -> None:
    before = target()
    after = _apply(before, _offload(DECODE))
    plugins = after["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    original = before["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    assert plugins[:2] == original[:2]
    assert _cpu_plugin(after)["parameters"] == {"autoTune": False, "lruCapacityPerServer": 25600}
    record = json.loads(after["metadata"]["annotations"][APPLIED_ANNOTATION])
    assert record["scheduler"]["lruCapacityPerServer"] == {"base": 41000, "applied": 25600}
    # In step: a re-render writes no patch, and keeps the user's recorded value.
    writes = target_patch(after, _offload(DECODE), scheduler_of(after, _offload(DECODE)))
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]
    again = json.loads(writes[0].body["metadata"]["annotations"][APPLIED_ANNOTATION])
    assert again["scheduler"] == record["scheduler"]


@pytest.mark.parametrize(
    "problem",
    [
        SchedulerProblem(DROPPED_REASON, "the picker moved to 0.9.0"),
        None,  # the config enables no CPU scorer any more
    ],
)
def test_a_sync_that_stops_gives_the_users_values_back_then_drops_the_record(
    problem: SchedulerProblem | None,
) -> None:
    before = target()
    synced = _apply(before, _offload(DECODE))
    assert _cpu_plugin(synced)["parameters"]["lruCapacityPerServer"] == 25600
    # kvtier no longer keeps the inline config in step: the user's values go back by a
    # guarded patch, and the apply keeps the record until they are back.
    writes = target_patch(synced, _offload(DECODE), problem)
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply", "Patch"]
    kept = json.loads(writes[0].body["metadata"]["annotations"][APPLIED_ANNOTATION])
    assert kept["scheduler"]["lruCapacityPerServer"] == {"base": 41000, "applied": 25600}
    back = _apply_as(synced, _offload(DECODE), problem)
    assert back["spec"]["router"] == before["spec"]["router"]
    # Once they are back: the record goes, and nothing more is written to the plugins.
    writes = target_patch(back, _offload(DECODE), problem)
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]
    final = json.loads(writes[0].body["metadata"]["annotations"][APPLIED_ANNOTATION])
    assert "scheduler" not in final
    settled = _apply_as(back, _offload(DECODE), problem)
    assert target_patch(settled, _offload(DECODE), problem) == writes


def test_a_user_edit_after_kvtiers_write_is_not_given_back_over() -> None:
    synced = _apply(target(), _offload(DECODE))
    _cpu_plugin(synced)["parameters"]["lruCapacityPerServer"] = 777  # the user's own now
    problem = SchedulerProblem(DROPPED_REASON, "the picker moved to 0.9.0")
    writes = target_patch(synced, _offload(DECODE), problem)
    assert isinstance(writes, list)
    back = _apply_as(synced, _offload(DECODE), problem)
    assert _cpu_plugin(back)["parameters"]["lruCapacityPerServer"] == 777
    # autoTune still held kvtier's false, whose user value was false too: nothing to give.
    assert _cpu_plugin(back)["parameters"]["autoTune"] is False


def test_the_patch_is_guarded_by_the_list_read() -> None:
    obj = target()
    writes = target_patch(obj, _offload(DECODE), scheduler_of(obj, _offload(DECODE)))
    assert isinstance(writes, list)
    ops = writes[-1].body["jsonPatch"]
    assert ops[0]["op"] == "test" and ops[0]["path"].endswith("/inline/plugins")
    raced = copy.deepcopy(obj)
    raced["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"].append({"type": "x"})
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(raced, ops)


@pytest.mark.parametrize(
    "parameters",
    [{"autoTune": True, "lruCapacityPerServer": 41000}, {"maxPrefixBlocksToMatch": 512}, None],
)
def test_unapply_gives_the_users_parameters_back(parameters: dict[str, Any] | None) -> None:
    before = target(epp_config(parameters or {}))
    if parameters is None:
        del _cpu_plugin(before)["parameters"]
    after = _apply(before, _offload(DECODE))
    assert _cpu_plugin(after)["parameters"]["autoTune"] is False
    undo = unapply_writes(after)
    assert jsonpatch.apply_patch(after, undo[0].body["jsonPatch"]) == before


def test_prefill_and_decode_share_one_index_the_smaller_tier_sizes_it() -> None:
    sync = sync_of(target(pd=True), [DECODE, PREFILL])
    assert isinstance(sync, SchedulerSync)
    assert sync.roles == ("prefill", "decode")
    assert sync.capacity == 40 * GiB // (16 * PER_TOKEN)
    only_decode = epp_config(pd=True)
    only_decode["schedulingProfiles"][0]["plugins"] = [{"pluginRef": "queue-scorer"}]
    sync = sync_of(target(only_decode, pd=True), [DECODE, PREFILL])
    assert isinstance(sync, SchedulerSync)
    assert (sync.roles, sync.capacity) == (("decode",), 25600)


def test_nothing_to_sync_without_an_enabled_cpu_scorer() -> None:
    no_cpu = epp_config()
    no_cpu["plugins"] = no_cpu["plugins"][:2]
    assert sync_of(target(no_cpu), [DECODE]) is None
    unused = epp_config()
    unused["schedulingProfiles"][0]["plugins"] = unused["schedulingProfiles"][0]["plugins"][:2]
    assert sync_of(target(unused), [DECODE]) is None
    bare = target()
    del bare["spec"]["router"]
    assert sync_of(bare, [DECODE]) is None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"apiVersion": "inference.networking.x-k8s.io/v2"}, "is not a scheduler config"),
        ({"parameters": {"lruCapacityPerServer": 1, "tierWeights": [1]}}, "tierWeights"),
        ({"parameters": {"blockSize": 64}}, "characters"),
        ({"type": "approx-prefix-cache-producer"}, "approx-prefix-cache-producer"),
        ({"parameters": {"blockSizeTokens": "16"}}, "is not a block size"),
    ],
)
def test_an_unknown_format_is_reported_and_left_alone(change: dict[str, Any], words: str) -> None:
    config = epp_config()
    if "apiVersion" in change:
        config.update(change)
    else:
        config["plugins"][2].update(change)
    obj = target(config)
    result = sync_of(obj, [DECODE])
    assert isinstance(result, SchedulerProblem) and result.reason == UNKNOWN_CONFIG_REASON
    assert words in result.message
    writes = target_patch(obj, _offload(DECODE), result)
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]
    assert "scheduler" not in writes[0].body["metadata"]["annotations"][APPLIED_ANNOTATION]


def test_a_config_in_a_configmap_is_not_the_inline_paths() -> None:
    """render/scheduler_configmap.py writes it (tests/unit/test_scheduler_configmap.py)."""
    obj = target()
    obj["spec"]["router"]["scheduler"]["config"] = {"ref": {"name": "epp", "key": "cfg"}}
    assert sync_of(obj, [DECODE]) is None
    assert config_ref(obj) == ("epp", "cfg")
    del obj["spec"]["router"]["scheduler"]["config"]["ref"]["key"]
    assert config_ref(obj) == ("epp", "epp")  # KServe v0.20's default key


def test_inference_service_has_no_scheduler() -> None:
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "spec": {}}
    assert scheduler_of(isvc, _offload(DECODE)) is None


def test_no_capacity_is_written_without_the_roles_bytes_per_token() -> None:
    bare = Offload(
        plan_offload(CONNECTOR, DECODE.cpu_bytes, 2 * DECODE.cpu_bytes, DECODE.cpu_bytes)
    )
    assert scheduler_of(target(), bare) is None


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        # No annotation and no scheduler preset read: KServe would stop (ConfigNotFound).
        (None, VERSION_UNKNOWN_REASON),
        ({"app.kubernetes.io/version": "0.9.0"}, DROPPED_REASON),
        ({"app.kubernetes.io/version": "0.10.2"}, DROPPED_REASON),
        ({"app.kubernetes.io/version": "latest"}, VERSION_UNKNOWN_REASON),
        ({"app.kubernetes.io/version": "0.8.1"}, None),
    ],
)
def test_a_picker_whose_scorer_takes_no_capacity_gets_a_condition_not_a_write(
    annotations: dict[str, str] | None, reason: str | None
) -> None:
    obj = target()
    scheduler = obj["spec"]["router"]["scheduler"]
    if annotations is None:
        del scheduler["annotations"]
    else:
        scheduler["annotations"] = annotations
    result = sync_of(obj, [DECODE])
    if reason is None:
        assert isinstance(result, SchedulerSync)
        return
    assert isinstance(result, SchedulerProblem) and result.reason == reason
    if reason == DROPPED_REASON:
        # The scorer names no producer: the capacity a producer would take, in its blocks.
        assert "approx-prefix-cache-producer" in result.message
        assert "lruCapacityPerServer: 6400 (blocks of 64 tokens" in result.message
    writes = target_patch(obj, _offload(DECODE), result)
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]


def producer_config(producer: dict[str, Any] | None = None) -> dict[str, Any]:
    """llm-d router v0.9.0's tiered layout: a producer per tier, each scorer naming its own."""
    config = epp_config()
    config["plugins"] = [
        {"type": "queue-scorer"},
        {"type": "approx-prefix-cache-producer", "name": "gpuPrefixProducer"},
        {
            "type": "approx-prefix-cache-producer",
            "name": "cpuPrefixProducer",
            "parameters": {"blockSizeTokens": 64} if producer is None else producer,
        },
        {
            "type": "prefix-cache-scorer",
            "name": "gpu-prefix-cache-scorer",
            "parameters": {"prefixMatchInfoProducerName": "gpuPrefixProducer"},
        },
        {
            "type": "prefix-cache-scorer",
            "name": CPU_SCORER,
            "parameters": {"prefixMatchInfoProducerName": "cpuPrefixProducer"},
        },
    ]
    return config


def _at_09(config: dict[str, Any]) -> dict[str, Any]:
    obj = target(config)
    obj["spec"]["router"]["scheduler"]["annotations"] = {"app.kubernetes.io/version": "0.9.0"}
    return obj


@pytest.mark.parametrize(
    ("producer", "capacity"),
    [
        (None, 100 * GiB // (64 * PER_TOKEN)),
        ({"blockSizeTokens": 16, "lruCapacityPerServer": 31250}, 100 * GiB // (64 * PER_TOKEN)),
        ({"blockSizeTokens": 128, "autoTune": True}, 100 * GiB // (128 * PER_TOKEN)),
    ],
)
def test_a_09_picker_gets_the_capacity_in_the_producer_its_cpu_scorer_names(
    producer: dict[str, Any] | None, capacity: int
) -> None:
    before = _at_09(producer_config(producer))
    sync = sync_of(before, [DECODE])
    assert isinstance(sync, SchedulerSync)
    # The producer indexes blocks of at least 64 tokens, whatever blockSizeTokens says.
    assert (sync.plugin, sync.capacity) == ("cpuPrefixProducer", capacity)
    assert sync.block_size_tokens == max(64, (producer or {}).get("blockSizeTokens", 64))
    after = _apply(before, _offload(DECODE))
    plugins = after["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    original = before["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]
    changed = [i for i, (a, b) in enumerate(zip(plugins, original, strict=True)) if a != b]
    assert changed == [2]
    assert plugins[2]["parameters"] == {
        **(producer if producer is not None else {"blockSizeTokens": 64}),
        "autoTune": False,
        "lruCapacityPerServer": capacity,
    }
    undo = unapply_writes(after)
    assert jsonpatch.apply_patch(after, undo[0].body["jsonPatch"]) == before


def test_a_09_scorer_naming_no_producer_of_the_config_is_left_alone() -> None:
    config = producer_config()
    config["plugins"][4]["parameters"]["prefixMatchInfoProducerName"] = "queue-scorer"
    result = sync_of(_at_09(config), [DECODE])
    assert isinstance(result, SchedulerProblem) and result.reason == UNKNOWN_CONFIG_REASON
    assert "not an approx-prefix-cache-producer" in result.message
