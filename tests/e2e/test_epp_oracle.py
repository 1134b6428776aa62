"""The endpoint picker's own config loader (tests/epp_oracle.py) on the exact texts kvtier writes
for the router's CPU-tier prefix index: inline in an LLMInferenceService and in a ConfigMap, in
both picker layouts (the scorer's own parameters before 0.9.0, the producer the scorer names
from 0.9.0). The index the picker builds holds kvtier's capacity with autoTune off, the user's
text after the take-back loads to what it loaded to before, and a text the loader would refuse
(or would size from another plugin) is never written: kvtier reports why instead.

No cluster is needed (it is under tests/e2e because it runs a Go build's output, built by
`make epp-oracle`, like test_kserve_runtime_oracle.py); a failed build fails these tests, they
never skip.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
import yaml

from kvtier.policy.scheduler import scheduler_verdict
from kvtier.render.picker_version import picker_layout
from kvtier.render.scheduler import (
    CPU_SCORER,
    UNKNOWN_CONFIG_REASON,
    SchedulerProblem,
    SchedulerSync,
)
from kvtier.render.scheduler_configmap import (
    configmap_restore_writes,
    configmap_sync,
    configmap_writes,
)
from kvtier.sizing import ConnectorSettings
from kvtier.targets.offload import Offload, RoleOffload, plan_offload
from kvtier.targets.registry import target_kind, target_patch, unapply_writes
from tests.epp_oracle import LOADER_PRODUCER, Picker, index, load, version
from tests.scheduler_fixtures import EPP, EPP_09

GiB = 1 << 30
PER_TOKEN = 262_144  # Qwen3-32B, 16-bit KV, whole server
CONNECTOR = ConnectorSettings(16)
DECODE = RoleOffload("decode", ("template",), CONNECTOR, 100 * GiB, 0, 0, PER_TOKEN, 100 * GiB)
OFFLOAD = Offload(plan_offload(CONNECTOR, 100 * GiB, 200 * GiB, 100 * GiB), roles=(DECODE,))
TIER = "0123456789abcdef"
# The picker version KServe reads from the annotation: the scorer's parameters before 0.9.0,
# the producer the scorer names from 0.9.0 (docs/llm-d.md).
LAYOUTS = {"scorer": (EPP, "0.8.0"), "producer": (EPP_09, "0.9.0")}


def _server(version: str, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {
            "model": {"uri": "hf://Qwen/Qwen3-32B"},
            "template": {"containers": [{"name": "main", "image": "vllm"}]},
            "router": {
                "scheduler": {
                    "annotations": {"app.kubernetes.io/version": version},
                    "config": config,
                }
            },
        },
    }


def _inline_text(obj: dict[str, Any]) -> str:
    """The inline config as KServe hands it to the picker (re-serialised)."""
    return yaml.safe_dump(obj["spec"]["router"]["scheduler"]["config"]["inline"])


def _apply(obj: dict[str, Any], writes: list[Any]) -> dict[str, Any]:
    """The object after kvtier's writes: the apply's annotations, then the JSON patches."""
    out = copy.deepcopy(obj)
    for w in writes:
        if w.action == "Patch":
            out = jsonpatch.apply_patch(out, w.body["jsonPatch"])
        else:
            out["metadata"].setdefault("annotations", {}).update(w.body["metadata"]["annotations"])
    return out


def _inline(text: str, version: str) -> tuple[str, SchedulerSync, str]:
    """(the text kvtier writes inline, its sync, the text after the take-back)."""
    before = _server(version, {"inline": yaml.safe_load(text)})
    sync = target_kind(before).scheduler(before, OFFLOAD, picker_layout(before, {}))
    assert isinstance(sync, SchedulerSync), sync
    writes = target_patch(before, OFFLOAD, sync)
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply", "Patch"]
    after = _apply(before, writes)
    back = _apply(after, unapply_writes(after))
    assert back["spec"] == before["spec"]
    return _inline_text(after), sync, _inline_text(back)


def _configmap(text: str, version: str) -> tuple[str, SchedulerSync, str]:
    """(the text kvtier writes in the ConfigMap's key, its sync, the text after the take-back)."""
    target = _server(version, {"ref": {"name": "epp-config"}})
    before = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "epp-config", "namespace": "llm", "resourceVersion": "7"},
        "data": {"epp": text},
    }
    sync = configmap_sync(target, before, [DECODE], TIER, picker_layout(target, {}))
    assert isinstance(sync, SchedulerSync), sync
    (write,) = configmap_writes(before, sync, TIER)
    after = jsonpatch.apply_patch(before, write.body["jsonPatch"])
    (undo,) = configmap_restore_writes(after, TIER)
    back = jsonpatch.apply_patch(after, undo.body["jsonPatch"])
    return after["data"]["epp"], sync, back["data"]["epp"]


WRITERS = {"inline": _inline, "configmap": _configmap}


def test_the_oracles_run_the_pinned_loaders() -> None:
    assert version("gie") == ("v1.5.0", "")
    assert version("llmd") == ("v1.4.0", "github.com/llm-d/llm-d-inference-scheduler v0.7.1")


@pytest.mark.parametrize("where", list(WRITERS))
def test_before_09_the_pickers_index_holds_kvtiers_capacity(where: str) -> None:
    """The scorer layout: llm-d v0.7's picker (v1.4.0) sizes the CPU scorer's own index by
    its parameters; v0.8.0's (v1.5.0) builds one producer from the last scorer's."""
    user_text, version_ = LAYOUTS["scorer"]
    text, sync, _ = WRITERS[where](user_text, version_)
    assert (sync.plugin, sync.capacity, sync.block_size_tokens) == (CPU_SCORER, 25600, 16)
    want = {"lruCapacityPerServer": sync.capacity, "autoTune": False, "blockSizeTokens": 16}
    checks: list[tuple[Picker, str, bool]] = [
        ("llmd", CPU_SCORER, True),
        ("gie", LOADER_PRODUCER, False),
    ]
    for picker, plugin, declared in checks:
        found = index(text, plugin, picker)
        assert found["declared"] is declared
        assert {k: found["parameters"][k] for k in want} == want, picker
        assert found["indexCapacity"] == sync.capacity, picker
        # The user's text gave the picker another capacity: the write is what changed it.
        assert index(user_text, plugin, picker)["indexCapacity"] == 41000


@pytest.mark.parametrize("where", list(WRITERS))
def test_from_09_the_named_producer_holds_kvtiers_capacity(where: str) -> None:
    user_text, version_ = LAYOUTS["producer"]
    text, sync, _ = WRITERS[where](user_text, version_)
    assert (sync.plugin, sync.capacity) == ("cpuPrefixProducer", 100 * GiB // (64 * PER_TOKEN))
    found = index(text, "cpuPrefixProducer", "gie")
    assert found["declared"] is True
    assert found["parameters"]["lruCapacityPerServer"] == found["indexCapacity"] == sync.capacity
    assert found["parameters"]["autoTune"] is False
    assert found["parameters"]["blockSizeTokens"] == 64  # the user's, kept
    # Declared producers: the loader adds none from the scorers' parameters.
    assert LOADER_PRODUCER not in load(text, "gie")["plugins"]
    assert index(user_text, "cpuPrefixProducer", "gie")["indexCapacity"] == 31250
    # A picker before the producer plugin (v1.4.0) refuses the layout: it is kvtier's only
    # from 0.9.0 on.
    old = load(text, "llmd")
    assert not old["ok"] and "approx-prefix-cache-producer' is not registered" in old["error"]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("where", list(WRITERS))
def test_the_take_back_loads_to_the_users_own_configuration(where: str, layout: str) -> None:
    user_text, version_ = LAYOUTS[layout]
    text, _, back = WRITERS[where](user_text, version_)
    pickers: list[Picker] = ["gie", "llmd"]
    for picker in pickers:
        original = load(user_text, picker)
        assert load(back, picker) == original, picker
        if original["ok"]:
            assert load(text, picker) != original, picker  # kvtier's write changed something


def _guide() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(EPP)
    return config


def _with_cpu_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    config = _guide()
    (cpu,) = [p for p in config["plugins"] if p.get("name") == CPU_SCORER]
    cpu["parameters"] = parameters
    return config


# The user's CPU-scorer parameters that kvtier's two values would make (or keep) unloadable,
# the words of kvtier's condition, and whether the user's own text loads.
REFUSED: dict[str, tuple[dict[str, Any], str, bool]] = {
    # autoTune false (kvtier's) is what makes the loader refuse a block size of 0.
    "blockSizeTokens 0": ({"blockSizeTokens": 0}, "blockSizeTokens 0 is not a block size", True),
    "blockSize beside blockSizeTokens 0": (
        {"blockSize": 64, "blockSizeTokens": 0},
        "blockSizeTokens 0 is not a block size",
        False,
    ),
    "maxPrefixTokensToMatch below 0": (
        {"blockSizeTokens": 16, "maxPrefixTokensToMatch": -1},
        "maxPrefixTokensToMatch -1, below 0",
        False,
    ),
    "maxPrefixBlocksToMatch not a number": (
        {"maxPrefixBlocksToMatch": "256"},
        "maxPrefixBlocksToMatch '256', not a whole number",
        False,
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_text_the_loader_refuses_is_never_written(case: str) -> None:
    parameters, words, user_loads = REFUSED[case]
    # The text kvtier would write: the user's parameters and its two values.
    would = _with_cpu_parameters({**parameters, "autoTune": False, "lruCapacityPerServer": 25600})
    refused = load(yaml.safe_dump(would), "gie")
    assert not refused["ok"] and refused["stage"] == "instantiate", refused
    config = _with_cpu_parameters(parameters)
    assert load(yaml.safe_dump(config), "gie")["ok"] is user_loads
    obj = _server("0.8.0", {"inline": config})
    problem = target_kind(obj).scheduler(obj, OFFLOAD, picker_layout(obj, {}))
    assert isinstance(problem, SchedulerProblem), problem
    writes = target_patch(obj, OFFLOAD, problem)
    assert isinstance(writes, list) and [w.action for w in writes] == ["Apply"]
    verdict = scheduler_verdict(problem, obj, None)
    assert verdict is not None and (verdict.status, verdict.reason) == ("False", problem.reason)
    assert problem.reason == UNKNOWN_CONFIG_REASON and words in verdict.message
    # The same refusal for the text in a ConfigMap.
    cm_target = _server("0.8.0", {"ref": {"name": "epp-config"}})
    configmap = {
        "metadata": {"name": "epp-config", "namespace": "llm"},
        "data": {"epp": yaml.safe_dump(config)},
    }
    found = configmap_sync(cm_target, configmap, [DECODE], TIER, picker_layout(cm_target, {}))
    assert isinstance(found, SchedulerProblem) and words in found.message


def test_a_block_size_the_loader_takes_is_written_and_holds() -> None:
    """The control for the refusals above: a parameter of the same kind the loader takes."""
    text, sync, _ = _inline(yaml.safe_dump(_with_cpu_parameters({"blockSizeTokens": 32})), "0.8.0")
    assert sync.capacity == 100 * GiB // (32 * PER_TOKEN)
    checks: list[tuple[Picker, str]] = [("llmd", CPU_SCORER), ("gie", LOADER_PRODUCER)]
    for picker, plugin in checks:
        found = index(text, plugin, picker)
        assert (found["indexCapacity"], found["parameters"]["blockSizeTokens"]) == (
            sync.capacity,
            32,
        )


def _reordered() -> dict[str, Any]:
    """The guide's layout with the CPU scorer before the GPU scorer."""
    config = _guide()
    plugins = config["plugins"]
    gpu = next(i for i, p in enumerate(plugins) if p.get("name") == "gpu-prefix-cache-scorer")
    cpu = next(i for i, p in enumerate(plugins) if p.get("name") == CPU_SCORER)
    plugins[gpu], plugins[cpu] = plugins[cpu], plugins[gpu]
    return config


def _declares_producer() -> dict[str, Any]:
    config = _guide()
    config["plugins"].insert(0, {"type": LOADER_PRODUCER, "name": "gpuPrefixProducer"})
    return config


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (_reordered, "list cpu-prefix-cache-scorer last"),
        (_declares_producer, "sits beside an approx-prefix-cache-producer"),
    ],
)
def test_a_scorer_whose_parameters_size_no_index_is_not_written(config: Any, words: str) -> None:
    """Before 0.9.0 on v1.5.0 the one index takes the last scorer's parameters, and none when
    the config declares a producer: kvtier's capacity there would size nothing."""
    user = config()
    would = copy.deepcopy(user)
    (cpu,) = [p for p in would["plugins"] if p.get("name") == CPU_SCORER]
    cpu["parameters"] = {"autoTune": False, "lruCapacityPerServer": 25600}
    out = load(yaml.safe_dump(would), "gie")
    assert out["ok"], out
    sized = [p for p in out["plugins"].values() if p.get("indexCapacity") is not None]
    assert sized and all(p["indexCapacity"] != 25600 for p in sized), sized
    obj = _server("0.8.0", {"inline": user})
    problem = target_kind(obj).scheduler(obj, OFFLOAD, picker_layout(obj, {}))
    assert isinstance(problem, SchedulerProblem) and problem.reason == UNKNOWN_CONFIG_REASON
    assert words in problem.message


@pytest.mark.parametrize("picker", ["gie", "llmd"])
def test_an_unloadable_text_is_the_loaders_error_not_a_crash(picker: Picker) -> None:
    out = load("plugins: [unclosed", picker)
    assert (out["ok"], out["stage"]) == (False, "load") and "yaml" in out["error"]
