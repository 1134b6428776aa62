"""The router's CPU-tier scorer when its config is in a ConfigMap (config.ref): the key's text
keeps everything the user wrote but kvtier's two values, the patch is guarded by the exact
text read, the user's values come back with the tier, and a namespace kvtier may not write
gets the values to set and how to grant the write."""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Mapping
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.names.records import SCHEDULER_RECORD as RECORD_ANNOTATION
from kvtier.names.records import configmap_record
from kvtier.policy.scheduler import configmap_step, referenced_configmap, scheduler_verdict
from kvtier.render.picker_version import picker_layout
from kvtier.render.scheduler import (
    CONFIG_REF_REASON,
    CPU_SCORER,
    DROPPED_REASON,
    UNKNOWN_CONFIG_REASON,
    SchedulerProblem,
    SchedulerSync,
)
from kvtier.render.scheduler_configmap import (
    GRANT_VALUE,
    SHARED_REASON,
    configmap_holds,
    configmap_restore_writes,
    configmap_sync,
    configmap_writes,
)
from kvtier.render.scheduler_text import edit_parameters
from kvtier.targets.offload import RoleOffload
from tests.scheduler_fixtures import CPU_PARAMETERS, plugin_parameters
from tests.scheduler_fixtures import EPP as GUIDE
from tests.unit.test_render_scheduler import CONNECTOR, PER_TOKEN, GiB, sync_of

DECODE = RoleOffload("decode", ("template",), CONNECTOR, 100 * GiB, 0, 0, PER_TOKEN, 100 * GiB)
BLOCKS = 100 * GiB // (16 * PER_TOKEN)  # 25600
TIER = "0123456789abcdef"


def _target(ref: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {
            "router": {
                "scheduler": {
                    "annotations": {"app.kubernetes.io/version": "0.8.0"},  # a 0.8 picker
                    "config": {"ref": ref or {"name": "epp-config"}},
                }
            }
        },
    }


def _configmap(text: str = GUIDE, name: str = "epp-config", key: str = "epp") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "llm", "resourceVersion": "7"},
        "data": {key: text, "other": "kept"},
    }


def cm_sync(
    target: dict[str, Any],
    configmap: Mapping[str, Any] | None,
    roles: list[RoleOffload],
    tier: str,
    layout: bool | SchedulerProblem | None = None,
) -> SchedulerSync | SchedulerProblem | None:
    """configmap_sync, the picker's version from the target alone unless `layout` says."""
    found = picker_layout(target, {}) if layout is None else layout
    return configmap_sync(target, configmap, roles, tier, found)


def _sync(configmap: dict[str, Any], target: dict[str, Any] | None = None) -> SchedulerSync:
    sync = cm_sync(target or _target(), configmap, [DECODE], TIER)
    assert isinstance(sync, SchedulerSync), sync
    return sync


def _written(configmap: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap after kvtier's patch."""
    (write,) = configmap_writes(configmap, _sync(configmap), TIER)
    out: dict[str, Any] = jsonpatch.apply_patch(configmap, write.body["jsonPatch"])
    return out


def _params(text: str) -> dict[str, Any]:
    return dict(plugin_parameters(text) or {})


def test_the_capacity_is_the_one_an_inline_config_gets() -> None:
    sync = _sync(_configmap())
    inline = copy.deepcopy(_target())
    inline["spec"]["router"]["scheduler"]["config"] = {"inline": yaml.safe_load(GUIDE)}
    same = sync_of(inline, [DECODE])
    assert isinstance(same, SchedulerSync)
    assert (sync.capacity, sync.plugins) == (same.capacity, same.plugins) == (BLOCKS, same.plugins)
    assert sync.configmap == ("epp-config", "epp")
    assert sync.status() == {**same.status(), "configMap": {"name": "epp-config", "key": "epp"}}


def test_only_kvtiers_two_values_change_in_the_users_text() -> None:
    after = _written(_configmap())
    text = after["data"]["epp"]
    assert text == GUIDE.replace("41000", str(BLOCKS))  # comments, quoting, blank line kept
    assert after["data"]["other"] == "kept"
    record = configmap_record(after)
    assert record is not None and record["tier"] == TIER and record["key"] == "epp"
    assert record["lruCapacityPerServer"] == {"base": 41000, "applied": BLOCKS}
    assert configmap_holds(after, _sync(after))
    # In step: nothing more to write, and the record keeps the user's value.
    assert configmap_writes(after, _sync(after), TIER) == []
    assert _sync(after).record == _sync(_configmap()).record


LAYOUTS = {
    "no autoTune": GUIDE.replace("    autoTune: false   # vLLM reports no CPU-tier capacity\n", ""),
    "no parameters": GUIDE.replace(CPU_PARAMETERS, ""),
    "flow parameters": GUIDE.replace(
        CPU_PARAMETERS, "  parameters: {maxPrefixBlocksToMatch: 256}\n"
    ),
    "indented sequences": """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: prefix-cache-scorer
    name: cpu-prefix-cache-scorer
    parameters:
        lruCapacityPerServer: 41000   # sized by hand
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: cpu-prefix-cache-scorer
""",
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_key_kvtier_adds_is_a_line_of_its_own_and_goes_with_the_tier(layout: str) -> None:
    before = _configmap(LAYOUTS[layout])
    user = _params(LAYOUTS[layout])
    after = _written(before)
    text = after["data"]["epp"]
    assert _params(text) == {**user, "autoTune": False, "lruCapacityPerServer": BLOCKS}
    # The user's lines are all still there but the one holding kvtier's value.
    diff = difflib.ndiff(LAYOUTS[layout].splitlines(), text.splitlines())
    gone = [line for line in diff if line.startswith("- ")]
    assert all("lruCapacityPerServer" in line or "parameters: {" in line for line in gone), gone
    (undo,) = configmap_restore_writes(after, TIER)
    assert jsonpatch.apply_patch(after, undo.body["jsonPatch"]) == before


def test_a_json_config_stays_json() -> None:
    config = yaml.safe_load(GUIDE)
    del config["plugins"][2]["parameters"]["autoTune"]
    text = json.dumps(config, indent=2)
    after = _written(_configmap(text))
    assert json.loads(after["data"]["epp"])["plugins"][2]["parameters"] == {
        "lruCapacityPerServer": BLOCKS,
        "autoTune": False,
    }


def test_a_layout_without_an_edit_in_place_is_written_anew_with_the_same_meaning() -> None:
    # The scorer's last entry is a block scalar: no line to add parameters after, so the
    # whole key is written from the parsed config (comments go, the meaning stays).
    text = LAYOUTS["no parameters"].replace(
        "  name: cpu-prefix-cache-scorer\n",
        "  name: cpu-prefix-cache-scorer\n  note: |\n    by hand\n",
    )
    out = edit_parameters(text, CPU_SCORER, {"autoTune": False, "lruCapacityPerServer": 5})
    config = yaml.safe_load(text)
    config["plugins"][2]["parameters"] = {"autoTune": False, "lruCapacityPerServer": 5}
    assert yaml.safe_load(out) == config
    assert "# Endpoint picker" not in out  # normalised, as docs/llm-d.md says


def test_the_patch_is_guarded_by_the_exact_text_read() -> None:
    before = _configmap()
    (write,) = configmap_writes(before, _sync(before), TIER)
    assert (write.action, write.kind, write.name, write.namespace) == (
        "Patch",
        "ConfigMap",
        "epp-config",
        "llm",
    )
    ops = write.body["jsonPatch"]
    assert ops[0] == {"op": "test", "path": "/data/epp", "value": GUIDE}
    raced = copy.deepcopy(before)
    raced["data"]["epp"] = GUIDE.replace("weight: 2", "weight: 3")  # the user's edit meanwhile
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(raced, ops)
    # Re-read, the next render keeps the user's edit and sets kvtier's value.
    again = _written(raced)["data"]["epp"]
    assert "weight: 3" in again and f"lruCapacityPerServer: {BLOCKS}" in again


def test_taking_the_tier_back_restores_the_user_text_exactly() -> None:
    before = _configmap()
    before["metadata"]["annotations"] = {"team": "router"}
    after = _written(before)
    assert set(after["metadata"]["annotations"]) == {"team", RECORD_ANNOTATION}
    (undo,) = configmap_restore_writes(after, TIER)
    assert jsonpatch.apply_patch(after, undo.body["jsonPatch"]) == before
    # A value the user changed since is theirs: only the record goes.
    edited = copy.deepcopy(after)
    edited["data"]["epp"] = edited["data"]["epp"].replace(str(BLOCKS), "30000")
    (undo,) = configmap_restore_writes(edited, TIER)
    restored = jsonpatch.apply_patch(edited, undo.body["jsonPatch"])
    assert _params(restored["data"]["epp"]) == {"autoTune": False, "lruCapacityPerServer": 30000}
    assert RECORD_ANNOTATION not in restored["metadata"]["annotations"]
    # Another tier's record is not this tier's to take back.
    assert configmap_restore_writes(after, "another-tier-id0") == []


@pytest.mark.parametrize(
    ("configmap", "reason", "words"),
    [
        (None, CONFIG_REF_REASON, "lruCapacityPerServer: 25600"),
        (_configmap(key="cfg"), CONFIG_REF_REASON, "has no key epp"),
        (_configmap("plugins: [unclosed"), UNKNOWN_CONFIG_REASON, "not one YAML document"),
        (
            _configmap(GUIDE.replace("v1alpha1", "v2")),
            UNKNOWN_CONFIG_REASON,
            "ConfigMap epp-config key epp: EndpointPickerConfig",
        ),
    ],
)
def test_what_kvtier_does_not_write_is_reported(
    configmap: dict[str, Any] | None, reason: str, words: str
) -> None:
    problem = cm_sync(_target(), configmap, [DECODE], TIER)
    assert isinstance(problem, SchedulerProblem) and problem.reason == reason
    assert words in problem.message


def test_one_configmap_cannot_follow_two_tiers() -> None:
    theirs = _written(_configmap())
    problem = cm_sync(_target(), theirs, [DECODE], "another-tier-id0")
    assert isinstance(problem, SchedulerProblem) and problem.reason == SHARED_REASON


def _step(
    configmaps: list[dict[str, Any]], target: dict[str, Any], forbidden: frozenset[str]
) -> tuple[Any, list[Any]]:
    current = referenced_configmap(target, configmaps)
    assert current is not None
    sync = cm_sync(target, current, [DECODE], TIER)
    assert isinstance(sync, SchedulerSync)
    writes = configmap_writes(current, sync, TIER)
    return configmap_step(sync, writes, configmaps, TIER, "llm", forbidden, [DECODE])


def test_a_namespace_kvtier_may_not_write_gets_the_value_and_the_grant() -> None:
    scheduler, writes = _step([_configmap()], _target(), frozenset({"epp-config"}))
    assert writes == []
    assert isinstance(scheduler, SchedulerProblem) and scheduler.reason == CONFIG_REF_REASON
    assert f"lruCapacityPerServer: {BLOCKS}" in scheduler.message
    assert GRANT_VALUE in scheduler.message and "namespace llm (403)" in scheduler.message
    verdict = scheduler_verdict(scheduler, _target(), _configmap())
    assert verdict is not None and (verdict.status, verdict.reason) == ("False", CONFIG_REF_REASON)


def test_a_configmap_the_target_no_longer_names_gets_the_users_values_back() -> None:
    old = _written(_configmap())
    moved = _target({"name": "epp-v2"})
    scheduler, writes = _step([old, _configmap(name="epp-v2")], moved, frozenset())
    assert isinstance(scheduler, SchedulerSync) and scheduler.configmap == ("epp-v2", "epp")
    assert [w.name for w in writes] == ["epp-v2", "epp-config"]
    assert f"lruCapacityPerServer {BLOCKS}" in writes[0].summary
    assert "the user's scorer values back" in writes[1].summary
    restored = jsonpatch.apply_patch(old, writes[1].body["jsonPatch"])
    assert restored == _configmap()


def test_synced_only_once_the_configmap_holds_kvtiers_values() -> None:
    before = _configmap()
    verdict = scheduler_verdict(_sync(before), _target(), before)
    assert verdict is not None and verdict.reason == "SchedulerSyncing"
    after = _written(before)
    verdict = scheduler_verdict(_sync(after), _target(), after)
    assert verdict is not None and (verdict.status, verdict.reason) == ("True", "SchedulerSynced")
    assert "ConfigMap epp-config key epp" in verdict.message and "start-up" in verdict.message


_OTHER = st.dictionaries(
    st.sampled_from(["maxPrefixBlocksToMatch", "blockSizeTokens", "lruCapacityPerServer"]),
    st.integers(min_value=1, max_value=10**6),
    max_size=3,
)


def _layout(params: dict[str, Any] | None, flow: bool, comment: bool) -> str:
    """The guide's config with the CPU scorer's parameters written in one of the styles."""
    lines = [
        "plugins:",
        "- type: prefix-cache-scorer",
        "  name: cpu-prefix-cache-scorer" + ("  # the CPU tier" if comment else ""),
    ]
    if params is not None and flow:
        inner = ", ".join(f"{k}: {v}" for k, v in params.items())
        lines.append(f"  parameters: {{{inner}}}")
    elif params is not None and params:
        lines += ["  parameters:", *(f"    {k}: {v}" for k, v in params.items())]
    lines += ["schedulingProfiles:", "- name: default", "  plugins: [{pluginRef: x}]"]
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None)
@given(
    params=st.one_of(st.none(), _OTHER),
    flow=st.booleans(),
    comment=st.booleans(),
    capacity=st.integers(min_value=1, max_value=10**7),
)
def test_any_layout_gets_kvtiers_values_and_back_byte_for_byte(
    params: dict[str, Any] | None, flow: bool, comment: bool, capacity: int
) -> None:
    if params == {} and not flow:
        params = None  # an empty block map is no map at all
    text = _layout(params, flow, comment)
    want = {**(params or {}), "lruCapacityPerServer": capacity, "autoTune": False}
    edited = edit_parameters(text, CPU_SCORER, want)
    assert _params(edited) == want
    assert edit_parameters(edited, CPU_SCORER, want) == edited  # in step: no change
    if comment:
        assert "# the CPU tier" in edited  # edited in place, not written anew
    assert edit_parameters(edited, CPU_SCORER, params) == text


def test_a_09_picker_gets_the_capacity_in_its_producer() -> None:
    target = _target()
    target["spec"]["router"]["scheduler"]["annotations"] = {"app.kubernetes.io/version": "0.9.0"}
    problem = cm_sync(target, _configmap(), [DECODE], TIER)
    assert isinstance(problem, SchedulerProblem) and problem.reason == DROPPED_REASON
    assert f"lruCapacityPerServer: {BLOCKS // 4} (blocks of 64 tokens" in problem.message
    # llm-d router v0.9.0's layout: the producer the CPU scorer names takes the capacity,
    # edited in place in the text and given back byte for byte.
    text = GUIDE.replace(
        "  name: cpu-prefix-cache-scorer\n  parameters:\n",
        "  name: cpu-prefix-cache-scorer\n  parameters:\n"
        "    prefixMatchInfoProducerName: cpuPrefixProducer\n",
    ).replace(
        "- type: queue-scorer\n",
        "- type: queue-scorer\n- type: approx-prefix-cache-producer\n"
        "  name: cpuPrefixProducer\n  parameters:\n    blockSizeTokens: 64\n",
    )
    before = _configmap(text)
    sync = cm_sync(target, before, [DECODE], TIER)
    assert isinstance(sync, SchedulerSync) and (sync.plugin, sync.capacity) == (
        "cpuPrefixProducer",
        BLOCKS // 4,
    )
    (write,) = configmap_writes(before, sync, TIER)
    after = jsonpatch.apply_patch(before, write.body["jsonPatch"])
    assert after["data"]["epp"] == text.replace(
        "    blockSizeTokens: 64\n",
        f"    blockSizeTokens: 64\n    lruCapacityPerServer: {BLOCKS // 4}\n    autoTune: false\n",
    )
    (undo,) = configmap_restore_writes(after, TIER)
    assert jsonpatch.apply_patch(after, undo.body["jsonPatch"]) == before
