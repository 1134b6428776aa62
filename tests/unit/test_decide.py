"""The pure decision for one tier: conditions, sizing, effective values, events."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kvtier.controller.workqueue import WorkQueue
from kvtier.policy.conditions import Verdict, merge_conditions
from kvtier.policy.contract import Facts
from kvtier.policy.decide import decide
from kvtier.policy.events import Event, announce
from kvtier.policy.placement import placement
from kvtier.policy.status_shape import short_quantity
from kvtier.policy.stored import status_patch
from kvtier.render import DesiredWrite
from kvtier.render.event import event_body
from kvtier.sizing import SizingInput, lookup_model, plan
from kvtier.targets.registry import target_facts
from tests.served_schemas import schemas_for

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEMOTRON = "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"


def node(name: str, gpus: int = 8, memory: str = "2Ti", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kvcache.io/local-nvme": "true", **labels}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "memory": memory}},
    }


NODES = [node(f"gpu-node-{i}") for i in range(4)]


def llmisvc(tp: int = 8, replicas: int = 1, uri: str = f"hf://{NEMOTRON}") -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": "nemotron-ultra", "namespace": "llm"},
        "spec": {
            "model": {"uri": uri},
            "replicas": replicas,
            "parallelism": {"tensor": tp},
            "template": {
                "containers": [
                    {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(tp)}}}
                ]
            },
        },
    }


def tier(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kvcache.io/v1alpha1",
        "kind": "KVCacheTier",
        "metadata": {"name": "nemotron", "namespace": "llm", "generation": 3},
        "spec": {
            "mode": "Plan",
            "targetRef": {"kind": "LLMInferenceService", "name": "nemotron-ultra"},
            "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
            **spec,
        },
    }


POLICY = {
    "metadata": {"name": "cluster"},
    "spec": {
        "nvmePools": [
            {
                "name": "local-nvme",
                "mountPath": "/var/mnt/nvme",
                "nodeSelector": {"kvcache.io/local-nvme": "true"},
                "capacityPerNode": "3Ti",
            }
        ]
    },
}


def facts(t: dict[str, Any], **kw: Any) -> Facts:
    base: dict[str, Any] = {
        "tier": t,
        "policy": POLICY,
        "target": llmisvc(),
        "config_map": None,
        "nodes": NODES,
        "now": NOW,
    }
    base.update(kw)
    base.setdefault("target_schemas", schemas_for(base["target"]))
    return Facts(**base)


def conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_plan_mode_sizes_from_target_and_nodes() -> None:
    d = decide(facts(tier(disk={"type": "Auto", "nvme": {"pool": "local-nvme"}})))
    expected = plan(
        SizingInput(
            geometry=lookup_model(NEMOTRON),
            average_context_tokens=50000,
            concurrent_sessions=64,
            tensor_parallel_size=8,
            node_memory_bytes=2 * 1024**4,
            available_disk_types=frozenset({"NVMe", "CephFS"}),
        )
    )
    assert d.status["sizing"] == expected.to_status()["sizing"]
    assert d.status["sizing"]["bytesPerTokenPerRank"] == 32768
    assert d.status["sizing"]["topology"] == "CPUAndNVMe"
    c = conds(d.status)
    assert c["Ready"]["status"] == "True" and c["Ready"]["reason"] == "Planned"
    assert all(x["observedGeneration"] == 3 for x in d.status["conditions"])
    assert d.status["diskTier"] == "NVMe (local-nvme)"
    assert {e.reason for e in d.events} == {"Planned"}  # one Event for a healthy new tier


def test_missing_target_waits_without_sizing() -> None:
    d = decide(facts(tier(), target=None))
    c = conds(d.status)
    assert c["TargetFound"]["reason"] == "TargetNotFound"
    assert "LLMInferenceService llm/nemotron-ultra" in c["TargetFound"]["message"]
    assert c["Ready"]["status"] == "False"
    assert "sizing" not in d.status and d.status["tiers"] is None


def test_unknown_pool_is_a_policy_condition() -> None:
    d = decide(facts(tier(disk={"type": "NVMe", "nvme": {"pool": "nope"}})))
    c = conds(d.status)
    assert c["PolicyCompliant"]["reason"] == "UnknownNVMePool"
    assert "spec.disk.nvme.pool" in c["PolicyCompliant"]["message"]
    assert "local-nvme" in c["PolicyCompliant"]["message"]  # lists what exists
    assert c["Ready"]["status"] == "False"


def test_tp_that_fits_no_way_names_the_field() -> None:
    d = decide(facts(tier(model={"tensorParallelSize": 3})))
    c = conds(d.status)
    assert c["Sized"]["status"] == "False"
    assert c["Sized"]["message"].startswith("spec.model.tensorParallelSize:")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({}, "ConfigMapKeyMissing"),
        ({"config.json": "{not json"}, "InvalidModelConfig"),
        ({"config.json": "[1, 2]"}, "InvalidModelConfig"),
        ({"config.json": " " * (2 * 1024 * 1024)}, "InvalidModelConfig"),
        ({"config.json": "[" * 100000 + "]" * 100000}, "InvalidModelConfig"),
    ],
)
def test_bad_model_configs_are_refused(data: dict[str, str], reason: str) -> None:
    t = tier(model={"configMapRef": {"name": "cfg", "key": "config.json"}})
    d = decide(facts(t, config_map={"data": data}))
    c = conds(d.status)["Sized"]
    assert (c["status"], c["reason"]) == ("False", reason)
    assert "spec.model.configMapRef" in c["message"]


def test_transition_time_moves_only_on_flip() -> None:
    first = decide(facts(tier()))
    later = tier()
    later["status"] = first.status
    second = decide(facts(later, now=NOW + timedelta(hours=1)))
    assert second.status["conditions"] == first.status["conditions"]
    assert second.events == []  # nothing flipped: no Events
    assert status_patch(first.status, second.status) is None
    gone = decide(facts(later, target=None, now=NOW + timedelta(hours=2)))
    ready = conds(gone.status)["Ready"]
    assert ready["status"] == "False"
    assert ready["lastTransitionTime"] == "2026-11-30T14:00:00Z"


def test_status_patch_removes_what_no_longer_applies() -> None:
    current = {"sizing": {"topology": "CPUOnly"}, "conditions": [], "plan": {"summary": "x"}}
    patch = status_patch(current, {"sizing": None, "conditions": [], "plan": {"summary": "x"}})
    assert patch == {"sizing": None}


def test_merge_conditions_drops_conditions_that_no_longer_apply() -> None:
    prev = [
        {
            "type": "Conflict",
            "status": "True",
            "reason": "X",
            "message": "",
            "lastTransitionTime": "t",
        }
    ]
    merged = merge_conditions(prev, [Verdict("Ready", "True", "Planned", "ok")], 1, NOW)
    assert [c["type"] for c in merged] == ["Ready"]


def test_inference_service_facts_read_args_and_replicas() -> None:
    f = target_facts(
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "spec": {
                "predictor": {
                    "minReplicas": 2,
                    "maxReplicas": 4,
                    "nodeSelector": {"pool": "a"},
                    "model": {
                        "storageUri": "hf://meta-llama/Llama-3.1-70B-Instruct",
                        "args": ["--tensor-parallel-size=4"],
                        "resources": {"limits": {"nvidia.com/gpu": "4", "memory": "100Gi"}},
                    },
                }
            },
        }
    )
    assert (f.model_name, f.tensor_parallel_size, f.replicas) == (
        "meta-llama/Llama-3.1-70B-Instruct",
        4,
        4,
    )
    assert f.node_selector == {"pool": "a"} and f.memory_limit_bytes == 100 * 1024**3


def test_placement_counts_pods_per_node_and_smallest_memory() -> None:
    nodes = [
        node("a", memory="1Ti"),
        node("b", memory="2Ti"),
        node("c", gpus=2),
        node("d", zone="x"),
    ]
    p = placement(nodes, {}, 4)
    assert p.eligible_nodes == ("a", "b", "d")
    assert p.node_memory_bytes == 1024**4
    assert p.pods_per_node == 2
    assert placement(nodes, {"zone": "x"}, 8).eligible_nodes == ("d",)


def test_short_quantity() -> None:
    assert short_quantity(547608330240) == "510Gi"
    assert short_quantity(3 * 1024**4) == "3Ti"
    assert short_quantity(1536 * 1024**2) == "1.5Gi"


def test_workqueue_dedupes_and_reruns_keys_changed_while_active() -> None:
    async def scenario() -> list[str]:
        q: WorkQueue[str] = WorkQueue()
        seen = []
        q.add("a")
        q.add("a")
        q.add("b")
        key = await q.get()
        q.add(key)  # changed while being processed
        q.done(key)
        seen.append(key)
        while not q.idle:
            k = await q.get()
            seen.append(k)
            q.done(k)
        return seen

    assert asyncio.run(scenario()) == ["a", "b", "a"]


def test_cpu_tier_above_the_node_share_is_a_policy_condition() -> None:
    d = decide(facts(tier(cpu={"size": "1Ti"})))
    c = conds(d.status)["PolicyCompliant"]
    assert (c["status"], c["reason"]) == ("False", "CPUTierAboveLimit")
    assert c["message"].startswith("spec.cpu.size: 1Ti is more than a model-server pod may take")
    assert conds(d.status)["Ready"]["status"] == "False"
    assert decide(facts(tier(cpu={"size": "500Gi"}))).status["conditions"][-1]["status"] == "True"


def test_plans_beyond_what_kubernetes_stores_are_refused_before_any_write() -> None:
    t = tier(mode="Apply", cpu={"size": "8Ei"})
    d = decide(facts(t))
    c = conds(d.status)["Sized"]
    assert (c["status"], c["reason"]) == ("False", "TooLarge")
    assert c["message"].startswith("spec.cpu.size:") and d.writes == []


def test_failed_policy_check_blocks_every_write() -> None:
    d = decide(facts(tier(mode="Apply", cpu={"size": "1Ti"})))
    assert conds(d.status)["PolicyCompliant"]["status"] == "False"
    assert d.writes == [] and d.probe is None


def test_explicit_geometry_needs_no_catalog_entry_for_the_targets_model() -> None:
    geometry = {"attentionLayers": 64, "kvHeads": 8, "headDim": 128}
    d = decide(facts(tier(model={"geometry": geometry}), target=llmisvc(uri="hf://acme/custom")))
    assert conds(d.status)["Sized"]["status"] == "True"
    assert d.status["sizing"]["bytesPerToken"] == 262144


def test_absurd_config_dimensions_name_the_configmap() -> None:
    config = (
        '{"model_type":"llama","num_hidden_layers":1000000000000000000000000000000,'
        '"num_attention_heads":64,"num_key_value_heads":8,"head_dim":128}'
    )
    t = tier(model={"configMapRef": {"name": "cfg", "key": "config.json"}})
    c = conds(decide(facts(t, config_map={"data": {"config.json": config}})).status)["Sized"]
    assert (c["status"], c["reason"]) == ("False", "InvalidModelConfig")
    assert c["message"].startswith("spec.model.configMapRef:")


def test_one_apply_tier_per_target_the_oldest_wins() -> None:
    t = tier(mode="Apply", disk={"type": "None"})
    t["metadata"]["creationTimestamp"] = "2026-11-30T10:00:00Z"
    older = [(1, "2026-11-30T09:00:00Z", "first")]
    d = decide(facts(t, rivals=older))
    c = conds(d.status)["Conflict"]
    assert (c["status"], c["reason"]) == ("True", "TargetClaimed") and "first" in c["message"]
    assert d.writes == [] and conds(d.status)["Ready"]["status"] == "False"
    newer = [(1, "2026-11-30T11:00:00Z", "second")]
    assert decide(facts(t, rivals=newer)).writes  # the oldest applies
    applied = [(0, "2026-11-30T11:00:00Z", "holder")]  # ...unless the other already applied
    assert decide(facts(t, rivals=applied)).writes == []
    planned = tier(mode="Plan")
    assert "Conflict" not in conds(decide(facts(planned, rivals=older)).status)


def _pv(name: str) -> DesiredWrite:
    return DesiredWrite("Apply", "v1", "PersistentVolume", name, None, {}, f"PV {name}")


def test_announce_folds_the_writes_into_the_ready_event() -> None:
    ready = Event("Normal", "Applied", "tiers provisioned and applied to the target")
    warn = Event("Warning", "NotBeneficial", "disk tier loses to recompute")
    events = announce([warn, ready], [_pv(f"pv-{i}") for i in range(5)])
    assert [e.reason for e in events] == ["NotBeneficial", "Applied"]  # one Event, not two
    assert events[1].message == (
        "tiers provisioned and applied to the target: 5 write(s): "
        "Apply PV pv-0; Apply PV pv-1; Apply PV pv-2 (+2 more)"
    )


def test_announce_tells_writes_of_their_own_when_ready_did_not_flip() -> None:
    warn = Event("Warning", "Degraded", "x")
    assert announce([warn], [_pv("a")]) == [
        Event("Normal", "Applied", "1 write(s): Apply PV a"),
        warn,
    ]
    assert announce([warn], []) == [warn]  # nothing written, nothing added
    # A Ready=False "Applied"-less flip never swallows the writes.
    failed = Event("Warning", "Applied", "odd")
    assert [e.message for e in announce([failed], [_pv("a")])] == ["1 write(s): Apply PV a", "odd"]


def test_event_body_names_the_tier_and_caps_the_message() -> None:
    tier = {"metadata": {"namespace": "ns", "name": "t", "uid": "u", "resourceVersion": "9"}}
    body = event_body(tier, "Warning", "NotSized", "x" * 5000, "pod-1", NOW)
    assert body["metadata"] == {"generateName": "t.", "namespace": "ns"}
    assert body["involvedObject"] == {
        "apiVersion": "kvcache.io/v1alpha1",
        "kind": "KVCacheTier",
        "name": "t",
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "9",
    }
    assert (body["type"], body["reason"], len(body["message"])) == ("Warning", "NotSized", 1024)
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-11-30T12:00:00Z"
    assert body["reportingInstance"] == "pod-1"


def test_spec_and_policy_are_parsed_once_per_content() -> None:
    from kvtier.policy.parse_cache import parse

    spec = {"disk": {"type": "Auto", "nvme": {"pool": "local-nvme"}}}
    policy_spec: dict[str, Any] = dict(POLICY["spec"])  # type: ignore[call-overload]
    first = parse(tier(**spec)["spec"], policy_spec)
    assert parse(tier(**spec)["spec"], policy_spec) is first  # kept
    # Any change of either body is new content: the memo never answers for the old one.
    other_tier = parse(tier(**spec, mode="Apply")["spec"], policy_spec)
    assert other_tier is not first and other_tier.settings.mode.value.value == "Apply"
    # One policy, parsed once for every tier; equal status.effective rows are one object.
    assert other_tier.policy is first.policy
    assert any(a is b for a, b in zip(first.effective, other_tier.effective, strict=True))
    # Tiers alike but for their target merge with the policy once: the settings are one.
    renamed = tier(**spec)["spec"] | {"targetRef": {"kind": "LLMInferenceService", "name": "b"}}
    second = parse(renamed, policy_spec)
    assert second is not first and second.spec.target_ref.name == "b"
    assert second.settings is first.settings and second.effective is first.effective
    assert parse(renamed | {"mode": "Apply"}, policy_spec).settings is other_tier.settings
    planning = {"spec": {**policy_spec, "defaults": {"mode": "Plan"}}}
    modeless = tier(disk={"type": "None"})
    del modeless["spec"]["mode"]
    assert decide(facts(modeless, policy=planning)).mode == "Plan"
    assert decide(facts(modeless, policy=POLICY)).mode == "Apply"  # the built-in default


def test_status_effective_rows_are_fresh_copies() -> None:
    t = tier(disk={"type": "None"})
    first = decide(facts(t)).status["effective"]
    first[0]["value"] = "changed by a caller"
    assert decide(facts(t)).status["effective"][0]["value"] != "changed by a caller"


def test_placement_follows_node_versions() -> None:
    def versioned(name: str, version: str, memory: str) -> dict[str, Any]:
        n = node(name, memory=memory)
        n["metadata"] |= {"uid": f"uid-{name}", "resourceVersion": version}
        return n

    before = [versioned("a", "1", "2Ti"), versioned("b", "1", "2Ti")]
    assert placement(before, {}, 8).node_memory_bytes == 2 * 1024**4
    assert placement(before, {}, 8) is placement(before, {}, 8)  # kept while no node changes
    after = [versioned("a", "2", "1Ti"), before[1]]  # node a updated: a new resourceVersion
    assert placement(after, {}, 8).node_memory_bytes == 1024**4
    assert placement(after, {"zone": "x"}, 8).eligible_nodes == ()  # the selector is in the key
    assert placement(after, {}, 16).eligible_nodes == ()  # so are the GPUs per pod
    # Nodes without uid and resourceVersion are never kept: an edit in place is seen.
    bare = [node("c", memory="2Ti")]
    assert placement(bare, {}, 8).node_memory_bytes == 2 * 1024**4
    bare[0]["status"]["allocatable"]["memory"] = "1Ti"
    assert placement(bare, {}, 8).node_memory_bytes == 1024**4


def _with_max_model_len(target: dict[str, Any], value: str) -> dict[str, Any]:
    target["spec"]["template"]["containers"][0]["args"] = ["--max-model-len", value]
    return target


def test_an_average_context_beyond_the_servers_max_model_len_is_not_sized() -> None:
    """vLLM refuses a request longer than --max-model-len: a tier sized for a longer average
    session would claim a working set no session fills. Sized=False names both numbers and
    the fix, Ready repeats it, and nothing is written."""
    t = tier(mode="Apply", workload={"averageContextTokens": 500000, "concurrentSessions": 64})
    d = decide(facts(t, target=_with_max_model_len(llmisvc(), "131072")))
    c = conds(d.status)
    assert (c["Sized"]["status"], c["Sized"]["reason"]) == ("False", "ContextExceedsMaxModelLen")
    message = c["Sized"]["message"]
    assert "spec.workload.averageContextTokens 500000" in message
    assert "--max-model-len 131072" in message
    assert "at most 131072" in message
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "ContextExceedsMaxModelLen")
    assert d.writes == [] and "sizing" not in d.status
    # vLLM's 128K (binary) style and an average right at the limit are sized.
    at_limit = tier(
        mode="Apply", workload={"averageContextTokens": 131072, "concurrentSessions": 8}
    )
    d = decide(facts(at_limit, target=_with_max_model_len(llmisvc(), "128K")))
    assert conds(d.status)["Sized"]["reason"] == "Sized"


def test_a_version_the_cluster_does_not_serve_is_not_a_missing_target() -> None:
    """spec.targetRef.apiVersion serving.kserve.io/v1 while the cluster serves InferenceService
    in v1beta1 only: the object may well exist there, so the reason says the version is not
    served and names the versions that are, not TargetNotFound."""
    ref = {"apiVersion": "serving.kserve.io/v1", "kind": "InferenceService", "name": "llama"}
    t = tier(targetRef=ref)
    d = decide(facts(t, target=None, target_versions=("serving.kserve.io/v1beta1",)))
    c = conds(d.status)
    assert (c["TargetFound"]["status"], c["TargetFound"]["reason"]) == (
        "False",
        "TargetVersionNotServed",
    )
    message = c["TargetFound"]["message"]
    assert message.startswith("spec.targetRef.apiVersion serving.kserve.io/v1: the cluster")
    assert "it serves InferenceService in serving.kserve.io/v1beta1" in message
    assert c["Ready"]["reason"] == "TargetVersionNotServed"
    # A registered version the cluster does not serve (LLMInferenceService v1alpha1 where only
    # v1alpha2 is): the same reason.
    ref = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService", "name": "x"}
    d = decide(
        facts(tier(targetRef=ref), target=None, target_versions=("serving.kserve.io/v1alpha2",))
    )
    assert conds(d.status)["TargetFound"]["reason"] == "TargetVersionNotServed"
    # A served version without the object, no version named, or nothing known: not found.
    served = ("serving.kserve.io/v1alpha1", "serving.kserve.io/v1alpha2")
    for spec, versions in ((ref, served), ({"kind": "InferenceService", "name": "y"}, None)):
        d = decide(facts(tier(targetRef=spec), target=None, target_versions=versions))
        assert conds(d.status)["TargetFound"]["reason"] == "TargetNotFound"
    d = decide(facts(tier(targetRef=ref), target=None, target_versions=()))
    assert (
        "serves no LLMInferenceService in group serving.kserve.io"
        in (conds(d.status)["TargetFound"]["message"])
    )
