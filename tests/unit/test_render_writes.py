"""render_writes end to end on the examples: order, contents, conflicts, plan status."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.api.policy import KVCachePolicy
from kvtier.api.tier import KVCacheTier, PlanStatus
from kvtier.names.labels import TIER_ID
from kvtier.render import DesiredWrite, RenderError, RenderResult, TierRef
from kvtier.render.result import PLAN_ACTIONS_MAX
from kvtier.render.writes import prune_writes, render_writes
from kvtier.settings import EffectiveSettings, effective_settings
from kvtier.sizing import SizingInput, SizingPlan, lookup_model, plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GiB = 1 << 30
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
NODES = [{"metadata": {"name": f"gpu-node-{i}", "labels": {**H100}}} for i in (1, 2, 3)] + [
    {"metadata": {"name": "cpu-node-1", "labels": {}}}
]


def _yaml(path: str) -> dict[str, Any]:
    """A fresh copy of an example: callers change theirs (the golden cases, hundreds)."""
    return copy.deepcopy(_example(path))


@cache
def _example(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / path).read_text())
    return loaded


def _setup(tier_file: str) -> tuple[TierRef, KVCacheTier, EffectiveSettings]:
    tier = KVCacheTier.model_validate(_yaml(tier_file))
    policy = KVCachePolicy.model_validate(_yaml("kvcachepolicy.yaml"))
    ref = TierRef(str(tier.metadata.namespace), str(tier.metadata.name), "uid-7")
    return ref, tier, effective_settings(tier.spec, policy.spec)


def _sizing(model: str, tp: int, ctx: int, sessions: int, replicas: int, **kw: Any) -> SizingPlan:
    return plan(
        SizingInput(
            geometry=lookup_model(model),
            tensor_parallel_size=tp,
            average_context_tokens=ctx,
            concurrent_sessions=sessions,
            replicas=replicas,
            node_memory_bytes=2048 * GiB,
            **kw,
        )
    )


def _walk(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _llama() -> RenderResult:
    ref, tier, settings = _setup("kvcachetier-llama70b-nvme.yaml")
    sizing = _sizing("llama-3.1-70b", 4, 50_000, 32, 1, cpu_bytes=256 * GiB, disk_type="NVMe")
    target = _yaml("targets/llama70b-isvc.yaml")
    return render_writes(ref, tier.spec, settings, sizing, target, NODES, 1)


def test_nvme_isvc_writes_in_order() -> None:
    result = _llama()
    assert result.conflict is None
    kinds = [w.kind for w in result.writes]
    assert kinds == ["StorageClass"] + ["PersistentVolume"] * 3 + ["InferenceService"]
    # One apply of the target, last: its atomic lists carried whole with the mounts.
    assert [w.action for w in result.writes] == ["Apply"] * 5
    pvs = result.writes[1:4]
    assert {w.body["spec"]["capacity"]["storage"] for w in pvs} == {"1Ti"}  # tier's nvme.size
    # The example pool is Local: PVs on the directory prepared on each node.
    assert {w.body["spec"]["local"]["path"] for w in pvs} == {"/var/mnt/nvme"}
    patch = result.writes[-1]
    assert (patch.name, patch.namespace) == ("llama-3-1-70b", "llm")
    assert "hostPath" not in set(_walk([patch.body]))  # pods never see a hostPath
    volumes = patch.body["spec"]["predictor"]["volumes"]
    assert [v["name"] for v in volumes] == ["chat-templates", "kvtier-dshm", "kvtier-kv-cache"]
    claim = volumes[2]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["selector"]["matchLabels"][TIER_ID] == TierRef("llm", "llama70b").id
    assert claim["storageClassName"] == result.writes[0].name
    model = patch.body["spec"]["predictor"]["model"]
    assert "env" not in model  # one replica: no shared hash seed
    # 64Gi (user) + 2 × 256Gi + 4Gi headroom.
    assert model["resources"]["requests"]["memory"] == "580Gi"
    assert "Retain" in result.summary


def test_cephfs_v1alpha1_three_replicas() -> None:
    ref, tier, settings = _setup("kvcachetier-gptoss-cephfs.yaml")
    sizing = _sizing("gpt-oss-120b", 2, 50_000, 128, 3, cpu_bytes=64 * GiB, disk_type="CephFS")
    target = _yaml("targets/gptoss-llmisvc-v1alpha1.yaml")
    result = render_writes(ref, tier.spec, settings, sizing, target, NODES, 3)
    kinds = [w.kind for w in result.writes]
    assert kinds == [
        "CephFilesystem",
        "StorageClass",
        "PersistentVolumeClaim",
        "LLMInferenceService",
    ]
    pvc = result.writes[2]
    assert pvc.body["spec"]["storageClassName"] == "ocs-storagecluster-cephfs-kvcache"
    assert pvc.body["spec"]["resources"]["requests"]["storage"] == "2Ti"
    assert pvc.body["metadata"]["ownerReferences"][0]["uid"] == "uid-7"  # retention Delete
    main = result.writes[-1].body["spec"]["template"]["containers"][0]
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["PYTHONHASHSEED"].isdigit()
    assert "--kv-transfer-config '" in env["VLLM_ADDITIONAL_ARGS"]
    volumes = result.writes[-1].body["spec"]["template"]["volumes"]
    assert volumes[1]["persistentVolumeClaim"] == {"claimName": pvc.name}


def test_nemotron_auto_nvme_v1alpha2() -> None:
    ref, tier, settings = _setup("kvcachetier.yaml")
    sizing = _sizing("nemotron-ultra-253b", 8, 50_000, 64, 1)
    assert sizing.disk == "NVMe"
    target = _yaml("targets/nemotron-llmisvc.yaml")
    result = render_writes(ref, tier.spec, settings, sizing, target, NODES, 1)
    patch = result.writes[-1]
    native = patch.body["spec"]["kvCacheOffloading"]
    assert native["secondary"][0]["fileSystem"]["pvc"]["spec"]["resources"] == {
        "requests": {"storage": "3Ti"}  # pool capacityPerNode: the tier names no size
    }
    assert "hostPath" not in set(_walk(patch.body))


def test_cpu_only_writes_only_the_patch() -> None:
    ref, tier, settings = _setup("kvcachetier.yaml")
    sizing = _sizing("nemotron-ultra-253b", 8, 1000, 1, 1)
    assert sizing.disk is None
    target = _yaml("targets/nemotron-llmisvc.yaml")
    result = render_writes(ref, tier.spec, settings, sizing, target, NODES, 1)
    assert [w.kind for w in result.writes] == ["LLMInferenceService"]
    assert "secondary" not in result.writes[0].body["spec"]["kvCacheOffloading"]


def test_conflict_writes_nothing() -> None:
    ref, tier, settings = _setup("kvcachetier-llama70b-nvme.yaml")
    sizing = _sizing("llama-3.1-70b", 4, 50_000, 32, 1, cpu_bytes=256 * GiB, disk_type="NVMe")
    target = _yaml("targets/llama70b-isvc.yaml")
    target["spec"]["predictor"]["model"]["args"] += ["--kv-transfer-config", "{}"]
    result = render_writes(ref, tier.spec, settings, sizing, target, NODES, 1)
    assert result.writes == [] and result.conflict is not None
    assert result.summary.startswith("Conflict: ")


def test_missing_pool_and_object_store_are_errors() -> None:
    ref, tier, _ = _setup("kvcachetier-llama70b-nvme.yaml")
    no_policy = effective_settings(tier.spec, None)
    sizing = _sizing("llama-3.1-70b", 4, 50_000, 32, 1, cpu_bytes=256 * GiB, disk_type="NVMe")
    target = _yaml("targets/llama70b-isvc.yaml")
    with pytest.raises(RenderError) as err:
        render_writes(ref, tier.spec, no_policy, sizing, target, NODES, 1)
    assert err.value.reason == "NVMePoolNotFound"
    s3 = _object_store_sizing("kv")
    with pytest.raises(RenderError) as err:  # this tier names no credentials Secret
        render_writes(ref, tier.spec, no_policy, s3, target, NODES, 1)
    assert err.value.reason == "ObjectStoreCredentialsRequired"  # vLLM 0.24 needs the keys


def _object_store_sizing(bucket: str, **kw: Any) -> SizingPlan:
    """Llama 3.1 70B at TP 4 with a 256 GiB CPU tier and an S3 bucket as its disk tier."""
    return _sizing(
        "llama-3.1-70b",
        4,
        50_000,
        32,
        1,
        cpu_bytes=256 * GiB,
        disk_type="ObjectStore",
        available_disk_types=frozenset({"ObjectStore"}),
        object_store_bucket=bucket,
        object_store_endpoint="https://s3.example.com",
        **kw,
    )


def _object_store(version: str, kind: str, secret: str | None) -> RenderResult:
    tier = KVCacheTier.model_validate(
        {
            "metadata": {"name": "s3", "namespace": "llm"},
            "spec": {
                "targetRef": {"kind": kind, "name": "t"},
                "workload": {"averageContextTokens": 50_000, "concurrentSessions": 32},
                "disk": {
                    "type": "ObjectStore",
                    "objectStore": {
                        "acknowledgeTailLatency": True,
                        "bucket": "kv-cache",
                        "endpoint": "https://s3.example.com",
                        **({"credentialsSecretRef": {"name": secret}} if secret else {}),
                    },
                },
            },
        }
    )
    sizing = _object_store_sizing("kv-cache", vllm_version=version)
    target = _yaml(
        "targets/llama70b-isvc.yaml"
        if kind == "InferenceService"
        else "targets/nemotron-llmisvc.yaml"
    )
    settings = effective_settings(tier.spec, None)
    return render_writes(
        TierRef("llm", "s3", "uid-9"), tier.spec, settings, sizing, target, NODES, 1
    )


def test_an_object_store_tier_gets_its_keys_by_reference() -> None:
    """No storage to provision; vLLM 0.24's config names the keys as $(VAR), which Kubernetes
    expands from env taken from the user's Secret by reference (kvtier never reads it)."""
    result = _object_store("0.24.0", "InferenceService", "s3-keys")
    (apply,) = result.writes
    assert apply.kind == "InferenceService"
    args = apply.body["spec"]["predictor"]["model"]["args"]
    store = json.loads(args[-1])["kv_connector_extra_config"]["secondary_tiers"][0]
    assert store["store_config"]["access_key"] == "$(AWS_ACCESS_KEY_ID)"
    env = {e["name"]: e for e in apply.body["spec"]["predictor"]["model"]["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "s3-keys", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert any("never reads it" in note for note in result.notes)


def test_an_llmisvc_object_store_tier_takes_the_flag_form_keys_first() -> None:
    """KServe's native field has no obj tier: the flag goes in VLLM_ADDITIONAL_ARGS, after the
    keys it names (Kubernetes expands $(VAR) only from earlier variables)."""
    (write,) = _object_store("0.24.0", "LLMInferenceService", "s3-keys").writes
    assert write.api_version == "serving.kserve.io/v1alpha1"
    names = [e["name"] for e in write.body["spec"]["template"]["containers"][0]["env"]]
    assert names[:3] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "VLLM_ADDITIONAL_ARGS"]


def test_newer_releases_take_an_object_store_without_a_secret() -> None:
    """vLLM 0.33's AWS SDK falls back to its default chain (e.g. a workload identity)."""
    (write,) = _object_store("0.33.0", "LLMInferenceService", None).writes
    env = write.body["spec"]["template"]["containers"][0]["env"]
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & {e["name"] for e in env}


def test_more_replicas_than_nodes_is_noted() -> None:
    ref, tier, settings = _setup("kvcachetier-llama70b-nvme.yaml")
    sizing = _sizing("llama-3.1-70b", 4, 50_000, 32, 4, cpu_bytes=256 * GiB, disk_type="NVMe")
    target = _yaml("targets/llama70b-isvc.yaml")
    result = render_writes(ref, tier.spec, settings, sizing, target, NODES, 4)
    assert any("Pending" in note for note in result.notes)


def test_plan_status_validates_against_the_crd_model() -> None:
    status = PlanStatus.model_validate(_llama().plan_status())
    assert status.actions is not None and len(status.actions) == 5
    assert status.actions[0].namespace is None  # cluster-scoped StorageClass
    assert status.actions[-1].kind == "InferenceService"


def test_plan_status_cap_keeps_the_target_writes() -> None:
    target = _llama().writes[-1]
    pv = _llama().writes[1]
    result = RenderResult(writes=[pv] * 100 + [target])
    actions = result.plan_status()["actions"]
    assert len(actions) == PLAN_ACTIONS_MAX
    assert (actions[-1]["action"], actions[-1]["kind"]) == ("Apply", "InferenceService")
    assert actions[-2]["kind"] == "PersistentVolume"
    assert result.summary.count("\n") == 100  # every write is in the summary


def test_prune_deletes_only_this_tiers_unwanted_objects() -> None:
    result = _llama()
    ref = TierRef("llm", "llama70b")
    pvs = [w.body for w in result.writes if w.kind == "PersistentVolume"]
    stale = {**pvs[0], "metadata": {**pvs[0]["metadata"], "name": "kvtier-old-node"}}
    other = {
        **pvs[0],
        "metadata": {"name": "x", "labels": {TIER_ID: TierRef("llm", "other").id}},
    }
    deletes = prune_writes(ref, [*pvs, stale, other], result.writes)
    assert [(d.action, d.kind, d.name, d.namespace) for d in deletes] == [
        ("Delete", "PersistentVolume", "kvtier-old-node", None)
    ]
    everything = prune_writes(ref, pvs, [])
    assert {d.name for d in everything} == {pv["metadata"]["name"] for pv in pvs}
    assert all(isinstance(d, DesiredWrite) for d in everything)


def _main(write: DesiredWrite) -> dict[str, Any]:
    container: dict[str, Any] = write.body["spec"]["template"]["containers"][0]
    return container


def _gptoss_cephfs(version: str, target: dict[str, Any] | None = None) -> RenderResult:
    ref, tier, settings = _setup("kvcachetier-gptoss-cephfs.yaml")
    sizing = _sizing(
        "gpt-oss-120b",
        2,
        50_000,
        128,
        3,
        cpu_bytes=64 * GiB,
        disk_type="CephFS",
        vllm_version=version,
    )
    target = target or _yaml("targets/gptoss-llmisvc-v1alpha1.yaml")
    return render_writes(ref, tier.spec, settings, sizing, target, NODES, 3)


def test_the_release_decides_the_hash_seed_and_the_stale_file_hook() -> None:
    """0.24 hashes with PYTHONHASHSEED and leaves its /dev/shm file after an OOMKill; 0.33
    neither: the seed and the postStart hook only where the release needs them."""
    old = _main(_gptoss_cephfs("0.24.0").writes[-1])
    assert "PYTHONHASHSEED" in {e["name"] for e in old["env"]}
    assert old["lifecycle"]["postStart"]["exec"]["command"][-1] == (
        "rm -f /dev/shm/vllm_offload_*.mmap"
    )
    result = _gptoss_cephfs("0.33.0")
    new = _main(result.writes[-1])
    assert "PYTHONHASHSEED" not in {e["name"] for e in new["env"]}
    assert "lifecycle" not in new
    assert not any("postStart" in note for note in result.notes)
    assert any("postStart" in note for note in _gptoss_cephfs("0.24.0").notes)


def test_a_users_own_post_start_hook_is_kept() -> None:
    target = _yaml("targets/gptoss-llmisvc-v1alpha1.yaml")
    own = {"exec": {"command": ["/bin/true"]}}
    target["spec"]["template"]["containers"][0]["lifecycle"] = {"postStart": own}
    assert "lifecycle" not in _main(_gptoss_cephfs("0.24.0", target).writes[-1])


def test_no_dev_shm_volume_where_the_release_keeps_the_tier_in_private_memory() -> None:
    ref, tier, settings = _setup("kvcachetier.yaml")
    target = _yaml("targets/nemotron-llmisvc.yaml")
    volumes = {}
    for version in ("0.24.0", "0.33.0"):
        sizing = _sizing("llama-3.1-70b", 8, 1000, 1, 1, vllm_version=version)
        assert sizing.disk is None
        (write,) = render_writes(ref, tier.spec, settings, sizing, target, NODES, 1).writes
        volumes[version] = {v["name"] for v in write.body["spec"]["template"].get("volumes", [])}
    assert "kvtier-dshm" not in volumes["0.24.0"]
    assert "kvtier-dshm" in volumes["0.33.0"]
