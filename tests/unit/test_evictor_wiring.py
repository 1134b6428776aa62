"""The evictor beside every disk tier: policy fields, effective values and the writes that
run it (a Deployment per CephFS claim, a native sidecar in an NVMe tier's pods)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from pydantic import ValidationError

from kvtier.api.policy import KVCachePolicy, KVCachePolicySpec
from kvtier.api.tier import KVCacheTier, ValueSource
from kvtier.evict.policy import DEFAULT_HIGH, DEFAULT_LOW, DEFAULT_PROTECT_SECONDS
from kvtier.evict.run import DEFAULT_INTERVAL_SECONDS
from kvtier.names.objects import EVICTOR_CONTAINER as CONTAINER
from kvtier.names.objects import KV_CACHE_VOLUME
from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.policy.provisioning import removal_writes
from kvtier.render import DesiredWrite, RenderResult, TierRef
from kvtier.render.quantities import quantity_to_bytes
from kvtier.render.writes import prune_writes, render_writes
from kvtier.settings import effective_settings
from kvtier.sizing import ConnectorSettings, SizingInput, lookup_model, plan
from kvtier.targets.offload import Offload, plan_offload
from kvtier.targets.registry import target_patch, unapply_writes
from kvtier.tiers.base import PerPodClaim, SharedClaim
from kvtier.tiers.common import evictor_settings
from tests.unit.test_render_targets import _applied_to

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GiB = 1 << 30
IMAGE = "quay.io/kvtier/kvtier-operator:9.9.9"
NODES = [
    {"metadata": {"name": f"gpu-{i}", "labels": {"nvidia.com/gpu.product": "H100"}}} for i in (1, 2)
]


def _yaml(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / path).read_text())
    return loaded


def _tier_spec() -> Any:
    return KVCacheTier.model_validate(_yaml("kvcachetier-gptoss-cephfs.yaml")).spec


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


# --- the policy fields -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eviction", "message"),
    [
        ({"highWatermark": 0.6, "lowWatermark": 0.7}, "lowWatermark must be below"),
        ({"highWatermark": 0.6}, "above the built-in lowWatermark"),
        ({"lowWatermark": 0.9}, "below the built-in highWatermark"),
        ({"highWatermark": 1}, "less than 1"),
        ({"lowWatermark": 0}, "greater than 0"),
        ({"intervalSeconds": 1}, "greater than or equal to 5"),
        ({"protectSeconds": -1}, "greater than or equal to 0"),
    ],
)
def test_bad_watermarks_are_refused_with_the_field(eviction: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        KVCachePolicySpec.model_validate({"eviction": eviction})
    assert message in str(err.value)
    assert "eviction" in str(err.value)


def test_defaults_are_kvtier_evicts_own() -> None:
    eff = effective_settings(_tier_spec(), None)
    assert eff.eviction_high_watermark.value == DEFAULT_HIGH == 0.85
    assert eff.eviction_low_watermark.value == DEFAULT_LOW == 0.70
    assert eff.eviction_protect_seconds.value == DEFAULT_PROTECT_SECONDS == 300
    assert eff.eviction_interval_seconds.value == DEFAULT_INTERVAL_SECONDS == 60
    assert eff.eviction_high_watermark.source is ValueSource.DEFAULT


def test_policy_values_win_and_are_reported() -> None:
    policy = KVCachePolicySpec.model_validate(
        {"eviction": {"highWatermark": 0.9, "protectSeconds": 60}}
    )
    eff = effective_settings(_tier_spec(), policy)
    rows = {e.field: (e.value, e.source) for e in eff.entries()}
    assert rows["eviction.highWatermark"] == ("0.9", ValueSource.POLICY)
    assert rows["eviction.lowWatermark"] == ("0.7", ValueSource.DEFAULT)
    assert rows["eviction.protectSeconds"] == ("60", ValueSource.POLICY)
    settings = evictor_settings(eff, IMAGE, 10 * GiB, 4 << 20)
    assert (settings.high, settings.low, settings.protect_seconds) == (0.9, 0.7, 60)


# --- CephFS: one Deployment per claim --------------------------------------------------------


def _cephfs() -> tuple[TierRef, RenderResult]:
    tier = KVCacheTier.model_validate(_yaml("kvcachetier-gptoss-cephfs.yaml"))
    policy = _yaml("kvcachepolicy.yaml")
    policy["spec"]["eviction"] = {"highWatermark": 0.8}
    eff = effective_settings(tier.spec, KVCachePolicy.model_validate(policy).spec)
    sizing = plan(
        SizingInput(
            geometry=lookup_model("gpt-oss-120b"),
            tensor_parallel_size=2,
            average_context_tokens=50_000,
            concurrent_sessions=128,
            replicas=3,
            node_memory_bytes=2048 * GiB,
            cpu_bytes=64 * GiB,
            disk_type="CephFS",
        )
    )
    ref = TierRef(str(tier.metadata.namespace), str(tier.metadata.name), "uid-7")
    target = _yaml("targets/gptoss-llmisvc-v1alpha1.yaml")
    result = render_writes(ref, tier.spec, eff, sizing, target, NODES, 3, evictor_image=IMAGE)
    return ref, result


def test_cephfs_tier_gets_one_evictor_deployment_on_its_claim() -> None:
    ref, result = _cephfs()
    kinds = [w.kind for w in result.writes]
    claim = result.writes[kinds.index("PersistentVolumeClaim")]
    deployment = result.writes[kinds.index("Deployment")]
    assert kinds.index("Deployment") > kinds.index("PersistentVolumeClaim")  # after its claim
    assert kinds.index("Deployment") < kinds.index("LLMInferenceService")
    spec = deployment.body["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim.name
    [container] = pod["containers"]
    assert container["image"] == IMAGE
    command = container["command"]
    assert command[:2] == ["kvtier", "evict"]
    requested = claim.body["spec"]["resources"]["requests"]["storage"]
    assert int(_arg(command, "--capacity")) == quantity_to_bytes(requested)
    assert (_arg(command, "--high"), _arg(command, "--low")) == ("0.8", "0.7")
    assert container["resources"]["limits"]["memory"]  # sized from the files it can hold
    owner = deployment.body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("KVCacheTier", ref.uid)
    assert f"on claim {claim.name}" in deployment.summary
    # No sidecar in the pods: CephFS is one shared volume.
    assert CONTAINER not in json.dumps([w.body for w in result.writes if w.kind != "Deployment"])


def test_an_evictor_no_longer_desired_is_pruned() -> None:
    ref, result = _cephfs()
    deployment = next(w for w in result.writes if w.kind == "Deployment")
    existing = [{"apiVersion": "apps/v1", "kind": "Deployment", **deployment.body}]
    assert prune_writes(ref, existing, result.writes) == []
    without = [w for w in result.writes if w.kind != "Deployment"]
    [delete] = prune_writes(ref, existing, without)
    assert (delete.action, delete.kind, delete.name) == ("Delete", "Deployment", deployment.name)


def test_an_evictor_goes_with_its_tier_even_when_claims_are_retained() -> None:
    _, result = _cephfs()
    deployment = next(w for w in result.writes if w.kind == "Deployment")
    claim = next(w for w in result.writes if w.kind == "PersistentVolumeClaim")
    owned = [{"apiVersion": w.api_version, "kind": w.kind, **w.body} for w in (deployment, claim)]
    writes = removal_writes(None, owned, delete_claims=False)
    assert [(w.action, w.kind) for w in writes] == [("Delete", "Deployment")]


# --- NVMe: a native sidecar in the model server's pods ---------------------------------------

NVME_SPEC = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Ti"}}}


def _offload(**changes: Any) -> Offload:
    eff = effective_settings(_tier_spec(), None)
    base: dict[str, Any] = {
        "plan": plan_offload(ConnectorSettings(16, "NVMe"), 256 * GiB, 516 * GiB, 260 * GiB),
        "disk": PerPodClaim(spec=NVME_SPEC),
        "disk_label": "NVMe",
        "evictor": evictor_settings(eff, IMAGE, 1 << 40, 5 << 20),
    }
    return Offload(**{**base, **changes})


def _target(name: str) -> dict[str, Any]:
    return _yaml(f"targets/{name}")


def _patched(target: dict[str, Any], writes: list[DesiredWrite]) -> dict[str, Any]:
    out = copy.deepcopy(target)
    for w in writes:
        if w.action == "Patch":
            out = jsonpatch.apply_patch(out, w.body["jsonPatch"])
    return out


def _isvc_after(target: dict[str, Any], offload: Offload) -> dict[str, Any]:
    """An InferenceService after kvtier's one apply."""
    writes = target_patch(target, offload)
    assert isinstance(writes, list)
    return _applied_to(target, writes)


def test_isvc_nvme_gets_the_sidecar_beside_the_users_init_containers() -> None:
    target = _target("llama70b-isvc.yaml")
    user_init = {"name": "fetch-model", "image": "busybox", "command": ["true"]}
    target["spec"]["predictor"]["initContainers"] = [user_init]
    after = _isvc_after(target, _offload())
    init = after["spec"]["predictor"]["initContainers"]
    assert [c["name"] for c in init] == ["fetch-model", CONTAINER]
    sidecar = init[1]
    assert sidecar["restartPolicy"] == "Always"  # native sidecar: runs beside vLLM
    assert sidecar["volumeMounts"] == [{"name": KV_CACHE_VOLUME, "mountPath": "/mnt/kv-cache"}]
    assert sidecar["image"] == IMAGE
    assert _arg(sidecar["command"], "--capacity") == str(1 << 40)
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    volumes = [v["name"] for v in after["spec"]["predictor"]["volumes"]]
    assert KV_CACHE_VOLUME in volumes  # the volume it shares is the pod's own
    # A re-render of the applied object carries the list as it is.
    again = target_patch(after, _offload())
    assert isinstance(again, list)
    assert again[-1].body["spec"]["predictor"]["initContainers"] == init


def test_isvc_take_back_removes_the_sidecar_and_restores_the_target() -> None:
    for users_init in (False, True):
        target = _target("llama70b-isvc.yaml")
        if users_init:
            target["spec"]["predictor"]["initContainers"] = [{"name": "fetch", "image": "b"}]
        after = _isvc_after(target, _offload())
        undo = unapply_writes(after)
        assert _patched(after, undo) == target


def test_shared_claims_and_cpu_only_get_no_sidecar() -> None:
    for offload in (_offload(disk=SharedClaim("kvtier-claim")), _offload(disk=None)):
        after = _isvc_after(_target("llama70b-isvc.yaml"), offload)
        assert "initContainers" not in after["spec"]["predictor"]


def test_llmisvc_v1alpha1_sidecar_is_applied_in_the_keyed_list() -> None:
    writes = target_patch(_target("gptoss-llmisvc-v1alpha1.yaml"), _offload())
    assert isinstance(writes, list)
    template = writes[-1].body["spec"]["template"]
    [sidecar] = template["initContainers"]
    assert sidecar["name"] == CONTAINER and sidecar["restartPolicy"] == "Always"
    assert sidecar["volumeMounts"][0]["name"] == KV_CACHE_VOLUME
    assert KV_CACHE_VOLUME in [v["name"] for v in template["volumes"]]
    # Without a per-pod disk, the apply drops it (server-side apply removes what kvtier
    # no longer applies).
    cpu_only = target_patch(_target("gptoss-llmisvc-v1alpha1.yaml"), _offload(disk=None))
    assert isinstance(cpu_only, list)
    assert "initContainers" not in cpu_only[-1].body["spec"]["template"]


def test_llmisvc_v1alpha2_sidecar_mounts_kserves_native_volume() -> None:
    writes = target_patch(_target("nemotron-llmisvc.yaml"), _offload())
    assert isinstance(writes, list)
    spec = writes[-1].body["spec"]
    assert spec["kvCacheOffloading"]["secondary"][0]["fileSystem"]["pvc"]["spec"] == NVME_SPEC
    [sidecar] = spec["template"]["initContainers"]
    assert sidecar["volumeMounts"] == [
        {"name": "kv-cache-secondary-0", "mountPath": "/mnt/kv-cache-0"}
    ]
    assert _arg(sidecar["command"], "--dir") == "/mnt/kv-cache-0"


def test_llmisvc_take_back_removes_the_sidecar() -> None:
    target = _target("gptoss-llmisvc-v1alpha1.yaml")
    writes = target_patch(target, _offload())
    assert isinstance(writes, list)
    applied = copy.deepcopy(target)
    template = applied["spec"]["template"]
    template["initContainers"] = writes[-1].body["spec"]["template"]["initContainers"]
    applied["metadata"].setdefault("annotations", {})[APPLIED_ANNOTATION] = writes[-1].body[
        "metadata"
    ]["annotations"][APPLIED_ANNOTATION]
    undone = _patched(applied, unapply_writes(applied))
    assert "initContainers" not in undone["spec"]["template"]
