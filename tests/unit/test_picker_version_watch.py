"""The endpoint picker's version from the LLMInferenceServiceConfigs the operator reads: the
whole decision follows a baseRef'd config or the preset as found, a config it cannot find
writes no scheduler values, and a config change wakes exactly the tiers whose target may
take its version from it."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from kvtier.controller.controller import Controller
from kvtier.controller.watches import on_llmisvc_config
from kvtier.kube.rest import Kube
from kvtier.policy.decide import decide
from kvtier.render.picker_version import PRESET
from kvtier.render.scheduler import CPU_SCORER, VERSION_ANNOTATION
from tests.unit.test_decide import conds, facts, llmisvc, tier

VERSION = "serving.kserve.io/v1alpha2"
# The scorer's own parameters: a 0.8 picker's layout, which KServe strips from 0.9.0 on.
PLUGINS: list[dict[str, Any]] = [
    {
        "type": "prefix-cache-scorer",
        "name": CPU_SCORER,
        "parameters": {"autoTune": True, "lruCapacityPerServer": 31250},
    },
]
INLINE = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": PLUGINS,
    "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": CPU_SCORER}]}],
}


def _target(base_refs: tuple[str, ...] = ()) -> dict[str, Any]:
    target = llmisvc()
    target["spec"]["router"] = {"scheduler": {"config": {"inline": copy.deepcopy(INLINE)}}}
    if base_refs:
        target["spec"]["baseRefs"] = [{"name": n} for n in base_refs]
    return target


def _config(namespace: str, name: str, version: str | None) -> dict[str, Any]:
    scheduler = {"annotations": {VERSION_ANNOTATION: version}} if version else {}
    return {
        "apiVersion": VERSION,
        "kind": "LLMInferenceServiceConfig",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "1"},
        "spec": {"router": {"scheduler": scheduler}},
    }


def _synced(d: Any) -> tuple[str | None, str]:
    """The plugin kvtier sizes, and SchedulerSynced's reason."""
    plugin = (d.status.get("plan", {}).get("scheduler") or {}).get("plugin")
    return plugin, conds(d.status)["SchedulerSynced"]["reason"]


def _decide(target: dict[str, Any], *configs: dict[str, Any]) -> Any:
    read = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in configs}
    return decide(
        facts(tier(mode="Apply", disk={"type": "None"}), target=target, llmisvc_configs=read)
    )


SCORER = (CPU_SCORER, "SchedulerSyncing")
DROPPED = (None, "SchedulerParametersDropped")  # 0.9.0: KServe strips the scorer's values


def test_a_base_ref_at_0_8_sizes_the_scorer_and_at_0_9_not() -> None:
    ns = _target()["metadata"]["namespace"]
    preset = _config("kserve", PRESET, "0.9.0")
    old = _decide(_target(("old-picker",)), preset, _config(ns, "old-picker", "0.8.0"))
    assert _synced(old) == SCORER
    new = _decide(_target(("old-picker",)), preset, _config(ns, "old-picker", "0.9.0"))
    assert _synced(new) == DROPPED


def test_the_preset_as_found_decides() -> None:
    assert _synced(_decide(_target(), _config("kserve", PRESET, "0.8.0"))) == SCORER
    assert _synced(_decide(_target(), _config("kserve", PRESET, "0.9.0"))) == DROPPED
    assert _synced(_decide(_target(), _config("kserve", PRESET, None))) == SCORER  # 0.0.0


def test_a_config_kvtier_cannot_find_writes_no_scheduler_values() -> None:
    d = _decide(_target(("gone",)), _config("kserve", PRESET, "0.9.0"))
    synced = conds(d.status)["SchedulerSynced"]
    assert (synced["status"], synced["reason"]) == ("False", "SchedulerVersionUnknown")
    assert "LLMInferenceServiceConfig gone" in synced["message"]
    assert "scheduler" not in d.status["plan"]
    assert all("router" not in str(w.body) for w in d.writes if w.kind == "LLMInferenceService")


def _controller() -> Controller:
    controller = Controller(Kube(client.ApiClient()))
    for name in ("qwen", "other"):
        controller.cache.set_tier(
            ("llm", name),
            {
                "metadata": {"namespace": "llm", "name": name, "resourceVersion": "1"},
                "spec": {"targetRef": {"kind": "LLMInferenceService", "name": name}},
            },
        )
    return controller


def _server(name: str, base_refs: tuple[str, ...]) -> dict[str, Any]:
    return {
        "apiVersion": VERSION,
        "kind": "LLMInferenceService",
        "metadata": {"namespace": "llm", "name": name, "resourceVersion": "2"},
        "spec": {"baseRefs": [{"name": n} for n in base_refs]},
    }


def _woken(controller: Controller, config: dict[str, Any]) -> list[tuple[str, str]]:
    controller.queue = type(controller.queue)()
    on_llmisvc_config(controller, "MODIFIED", config)
    return sorted(controller.queue._pending)


def test_a_config_change_wakes_exactly_the_tiers_that_may_use_it() -> None:
    controller = _controller()
    cache = controller.cache
    cache.set_target(("LLMInferenceService", "llm", "qwen"), VERSION, _server("qwen", ("a",)))
    cache.set_target(("LLMInferenceService", "llm", "other"), VERSION, _server("other", ("b",)))
    assert _woken(controller, _config("llm", "a", "0.8.0")) == [("llm", "qwen")]
    assert _woken(controller, _config("kserve", "a", "0.8.0")) == [("llm", "qwen")]
    assert _woken(controller, _config("elsewhere", "a", "0.8.0")) == []
    assert _woken(controller, _config("kserve", PRESET, "0.8.0")) == [
        ("llm", "other"),
        ("llm", "qwen"),
    ]
    # The target drops its baseRef: that config no longer concerns it.
    cache.set_target(("LLMInferenceService", "llm", "qwen"), VERSION, _server("qwen", ()))
    assert _woken(controller, _config("llm", "a", "0.9.0")) == []
    assert cache.llmisvc_configs_for(_server("other", ("b",))) == {
        ("kserve", PRESET): _config("kserve", PRESET, "0.8.0")
    }
