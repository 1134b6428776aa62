"""The whole decision for a tier whose target keeps its scheduler config in a ConfigMap: the
ConfigMap patch comes last in Apply mode and is listed in Plan mode, a 403 turns it into the
value to set and the grant, and once the ConfigMap holds kvtier's values nothing is written."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch

from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.policy.decide import decide
from kvtier.render.scheduler_configmap import GRANT_VALUE
from tests.scheduler_fixtures import EPP
from tests.unit.test_decide import conds, facts, llmisvc, tier


def _target() -> dict[str, Any]:
    target = llmisvc()
    target["spec"]["router"] = {
        "scheduler": {
            "annotations": {"app.kubernetes.io/version": "0.8.0"},  # a 0.8 picker
            "config": {"ref": {"name": "epp", "key": "epp"}},
        }
    }
    return target


def _configmap(text: str = EPP) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "epp", "namespace": "llm", "resourceVersion": "3"},
        "data": {"epp": text},
    }


def _decide(mode: str, configmap: dict[str, Any], forbidden: frozenset[str] = frozenset()) -> Any:
    return decide(
        facts(
            tier(mode=mode, disk={"type": "None"}),
            target=_target(),
            scheduler_configmaps=[configmap],
            scheduler_forbidden=forbidden,
        )
    )


def test_apply_mode_patches_the_configmap_last_and_keeps_no_record_on_the_target() -> None:
    d = _decide("Apply", _configmap())
    *rest, last = d.writes
    assert (last.kind, last.name, last.action) == ("ConfigMap", "epp", "Patch")
    scheduler = d.status["plan"]["scheduler"]
    assert scheduler["lruCapacityPerServer"] == d.status["plan"]["roles"][0]["cpuTierBlocks"]
    assert scheduler["configMap"] == {"name": "epp", "key": "epp"}  # where it is written
    assert conds(d.status)["SchedulerSynced"]["reason"] == "SchedulerSyncing"
    apply = next(w for w in rest if w.kind == "LLMInferenceService" and w.action == "Apply")
    assert "scheduler" not in json.loads(apply.body["metadata"]["annotations"][APPLIED_ANNOTATION])
    # Once the ConfigMap holds the values: nothing more for it, and Synced.
    written = jsonpatch.apply_patch(_configmap(), last.body["jsonPatch"])
    again = _decide("Apply", written)
    assert [w for w in again.writes if w.kind == "ConfigMap"] == []
    assert conds(again.status)["SchedulerSynced"]["status"] == "True"


def test_plan_mode_lists_the_configmap_patch_and_writes_nothing() -> None:
    d = _decide("Plan", _configmap())
    assert d.writes == []
    kinds = [a["kind"] for a in d.status["plan"]["actions"]]
    assert kinds[-1] == "ConfigMap"
    assert "ConfigMap epp key epp" in d.status["plan"]["summary"]


def test_a_forbidden_configmap_gets_the_value_and_the_grant_and_no_write() -> None:
    d = _decide("Apply", _configmap(), frozenset({"epp"}))
    assert [w for w in d.writes if w.kind == "ConfigMap"] == []
    synced = conds(d.status)["SchedulerSynced"]
    blocks = d.status["plan"]["roles"][0]["cpuTierBlocks"]
    assert (synced["status"], synced["reason"]) == ("False", "SchedulerConfigRef")
    assert f"lruCapacityPerServer: {blocks}" in synced["message"]
    assert GRANT_VALUE in synced["message"]
    assert "scheduler" not in d.status["plan"]
    allowed = _decide("Apply", _configmap())
    assert conds(d.status)["Ready"] == conds(allowed.status)["Ready"]  # never blocks Ready
