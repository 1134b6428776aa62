"""Which tiers a ConfigMap change wakes for the router's scheduler config, what the cache keeps
of it, and how long a 403 holds kvtier's write to it back."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client

from kvtier.controller import controller as controller_module
from kvtier.controller.controller import Controller
from kvtier.controller.watches import on_configmap
from kvtier.kube.rest import Kube
from kvtier.names.objects import tier_id
from kvtier.names.records import SCHEDULER_RECORD as RECORD_ANNOTATION
from kvtier.render import DesiredWrite

KEY = ("llm", "qwen")
TARGET = ("LLMInferenceService", "llm", "qwen")
VERSION = "serving.kserve.io/v1alpha2"


def _controller() -> Controller:
    controller = Controller(Kube(client.ApiClient()))
    controller.cache.set_tier(
        KEY,
        {
            "metadata": {"namespace": "llm", "name": "qwen", "resourceVersion": "1"},
            "spec": {"targetRef": {"kind": "LLMInferenceService", "name": "qwen"}},
        },
    )
    return controller


def _target(ref: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"ref": {"name": ref, "key": "epp"}} if ref else {"inline": {}}
    return {
        "apiVersion": VERSION,
        "kind": "LLMInferenceService",
        "metadata": {"namespace": "llm", "name": "qwen", "resourceVersion": "2"},
        "spec": {"router": {"scheduler": {"config": config}}},
    }


def _configmap(name: str, rv: int, record: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "llm", "name": name, "resourceVersion": str(rv)}
    if record is not None:
        meta["annotations"] = {RECORD_ANNOTATION: json.dumps({"tier": record, "key": "epp"})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"epp": "x"}}


def _drain(controller: Controller) -> int:
    count = len(controller.queue)
    controller.queue = type(controller.queue)()
    return count


def test_the_configmap_a_target_names_wakes_its_tier_and_is_kept() -> None:
    controller = _controller()
    controller.cache.set_target(TARGET, VERSION, _target("epp-config"))
    on_configmap(controller, "ADDED", _configmap("unrelated", 3))
    assert _drain(controller) == 0 and ("llm", "unrelated") not in controller.cache.configmaps
    on_configmap(controller, "ADDED", _configmap("epp-config", 4))
    assert _drain(controller) == 1 and ("llm", "epp-config") in controller.cache.configmaps
    # The echo of kvtier's own patch (its response already cached) is no news.
    controller.cache.remember_written(_configmap("epp-config", 5, tier_id(*KEY)))
    on_configmap(controller, "MODIFIED", _configmap("epp-config", 5, tier_id(*KEY)))
    assert _drain(controller) == 0
    # The target's ref moves on: the old ConfigMap is no longer the target's, but its record
    # still ties it to the tier, which must give the user's values back there.
    controller.cache.set_target(TARGET, VERSION, _target(None))
    assert list(controller.cache.scheduler_configmaps(KEY)) == [("llm", "epp-config")]
    on_configmap(controller, "MODIFIED", _configmap("epp-config", 6, tier_id(*KEY)))
    assert _drain(controller) == 1
    # The record gone (the values given back): one last wake-up, and the tie is forgotten.
    on_configmap(controller, "MODIFIED", _configmap("epp-config", 7))
    assert _drain(controller) == 1
    assert controller.cache.scheduler_configmaps(KEY) == {}
    on_configmap(controller, "MODIFIED", _configmap("epp-config", 8))
    assert _drain(controller) == 0


def test_a_record_of_another_tier_wakes_only_that_tier() -> None:
    controller = _controller()
    on_configmap(controller, "ADDED", _configmap("epp-config", 3, "another-tier-id0"))
    assert _drain(controller) == 0
    assert controller.cache.scheduler_configmaps(KEY) == {}


def test_a_403_holds_the_write_back_until_the_configmap_changes_or_time_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    controller = _controller()
    configmap = _configmap("epp-config", 4)
    controller.cache.set_configmap(configmap, deleted=False)
    write = DesiredWrite("Patch", "v1", "ConfigMap", "epp-config", "llm", {"jsonPatch": []}, "")
    now = [1000.0]
    clock = SimpleNamespace(monotonic=lambda: now[0])
    monkeypatch.setattr("kvtier.controller.controller.time", clock)
    tier = controller.cache.tiers[KEY]

    async def forbid() -> None:  # the retry is scheduled on the running loop
        controller._forbid(tier, write)

    asyncio.run(forbid())
    assert controller._forbidden([configmap]) == {"epp-config"}
    assert controller._forbidden([_configmap("epp-config", 9)]) == frozenset()  # changed
    now[0] += controller_module.FORBIDDEN_RETRY_SECONDS
    assert controller._forbidden([configmap]) == frozenset()  # time to look for the grant
