"""Model-server writes: one apply per kind, field by field, its atomic lists carried whole
under the generation guard; conflicts, memory, removal. The take-back's JSON patches are
applied with the `jsonpatch` library (RFC 6902), as the API server would."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from kvtier.names.objects import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.policy.provisioning import object_key, pending_writes
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.sizing import ConnectorSettings, kv_transfer_config
from kvtier.targets.base import Conflict
from kvtier.targets.offload import Offload, plan_offload
from kvtier.targets.pod import memory_for
from kvtier.targets.registry import target_patch, unapply_writes
from kvtier.tiers.base import PerPodClaim, SharedClaim

TARGETS = Path(__file__).resolve().parents[2] / "examples" / "targets"
GiB = 1 << 30
CONNECTOR = ConnectorSettings(16, "NVMe")
CONFIG = kv_transfer_config(256 * GiB, 16, "NVMe")
ARG = json.dumps(CONFIG, separators=(",", ":"))
NVME_SPEC = {
    "accessModes": ["ReadWriteOnce"],
    "storageClassName": "kvtier-nvme-local-nvme",
    "resources": {"requests": {"storage": "1Ti"}},
    "selector": {"matchLabels": {"kvcache.io/tier-id": "abc"}},
}


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((TARGETS / name).read_text())
    return loaded


def _isvc() -> dict[str, Any]:
    return _load("llama70b-isvc.yaml")


def _v1alpha1() -> dict[str, Any]:
    return _load("gptoss-llmisvc-v1alpha1.yaml")


def _v1alpha2() -> dict[str, Any]:
    return _load("nemotron-llmisvc.yaml")


def _offload(cpu_bytes: int = 256 * GiB, **changes: Any) -> Offload:
    base: dict[str, Any] = {
        "plan": plan_offload(CONNECTOR, cpu_bytes, 516 * GiB, 260 * GiB),
        "disk": PerPodClaim(spec=NVME_SPEC),
        "disk_label": "NVMe",
    }
    return Offload(**{**base, **changes})


def _writes(target: dict[str, Any], offload: Offload | None = None) -> list[DesiredWrite]:
    result = target_patch(target, offload or _offload())
    assert isinstance(result, list), result
    assert [w.action for w in result] == ["Apply"]  # one write per target
    return result


def _patch(target: dict[str, Any], offload: Offload | None = None) -> DesiredWrite:
    """The apply: the one write."""
    return _writes(target, offload)[-1]


def _patched(target: dict[str, Any], writes: list[DesiredWrite]) -> dict[str, Any]:
    """The target after the JSON patches among `writes` (a failed test op raises)."""
    out = copy.deepcopy(target)
    for w in writes:
        if w.action == "Patch":
            out = jsonpatch.apply_patch(out, w.body["jsonPatch"])
    return out


def _main(body: dict[str, Any]) -> dict[str, Any]:
    containers = body["spec"]["template"]["containers"]
    assert [c["name"] for c in containers] == ["main"]
    main: dict[str, Any] = containers[0]
    return main


def _record(body: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(body["metadata"]["annotations"][APPLIED_ANNOTATION])
    return record


def _merge_keyed(dst: dict[str, Any], src: dict[str, Any], field: str, key: str) -> None:
    """A keyed list as server-side apply merges it: entries by `key`, fields laid over."""
    if field not in src:
        return
    items = dst.setdefault(field, [])
    for entry in src[field]:
        same = next((i for i in items if i[key] == entry[key]), None)
        if same is None:
            items.append(copy.deepcopy(entry))
        else:
            same.update(copy.deepcopy(entry))


def _applied_to(target: dict[str, Any], writes: list[DesiredWrite]) -> dict[str, Any]:
    """The target after `writes`: JSON patches applied, then the apply that is the last
    (server-side apply's merge, for the fields kvtier sets; the atomic lists it carries
    replaced whole)."""
    out = _patched(target, writes)
    write = writes[-1]
    for dotted in write.carried:
        assert "[" not in dotted  # the InferenceService's lists: no keyed step on the way
        *parents, last = dotted.split(".")
        src, dst = write.body, out
        for key in parents:
            src, dst = src[key], dst.setdefault(key, {})
        dst[last] = copy.deepcopy(src[last])
    out.setdefault("metadata", {}).setdefault("annotations", {}).update(
        write.body["metadata"]["annotations"]
    )
    if out["kind"] == "InferenceService":
        src, dst = write.body["spec"]["predictor"]["model"], out["spec"]["predictor"]["model"]
    else:
        src, dst = _main(write.body), _main(out)
        _merge_keyed(out["spec"]["template"], write.body["spec"]["template"], "volumes", "name")
        if "kvCacheOffloading" in write.body["spec"]:
            out["spec"]["kvCacheOffloading"] = write.body["spec"]["kvCacheOffloading"]
    _merge_keyed(dst, src, "env", "name")
    _merge_keyed(dst, src, "volumeMounts", "mountPath")
    resources = dst.setdefault("resources", {})
    for section, values in src["resources"].items():
        resources.setdefault(section, {}).update(values)
    if "lifecycle" in src:
        dst.setdefault("lifecycle", {}).update(src["lifecycle"])
    return out


def _undone(target: dict[str, Any]) -> dict[str, Any]:
    """`target` after kvtier takes its fields back."""
    undo = unapply_writes(target)
    assert [w.action for w in undo] == ["Patch"]  # one JSON patch: all or nothing
    return _patched(target, undo)


# --- InferenceService -------------------------------------------------------------------------


def test_isvc_one_apply_carries_the_atomic_lists_whole() -> None:
    target = _isvc()
    target["metadata"]["generation"] = 42
    write = _patch(target)
    body = write.body
    assert (write.action, write.kind, write.name, write.namespace) == (
        "Apply",
        "InferenceService",
        "llama-3-1-70b",
        "llm",
    )
    assert body["apiVersion"] == "serving.kserve.io/v1beta1"
    # The guard is sent with the apply, not part of what kvtier owns.
    assert set(body["metadata"]) == {"name", "namespace", "annotations"}
    assert write.guard == 42
    # The atomic lists (volumes, args) are carried whole; nothing else of the predictor.
    assert set(body["spec"]["predictor"]) == {"model", "volumes"}
    assert write.carried == ("spec.predictor.model.args", "spec.predictor.volumes")
    model = body["spec"]["predictor"]["model"]
    assert set(model) == {"resources", "volumeMounts", "args"}  # no env: one replica
    assert model["volumeMounts"] == [
        {"name": DSHM_VOLUME, "mountPath": "/dev/shm"},
        {"name": KV_CACHE_VOLUME, "mountPath": "/mnt/kv-cache"},
    ]
    # The record names the flag the same request puts in args.
    assert _record(body)["kvTransferConfig"] == model["args"][-1]


def test_isvc_atomic_lists_keep_the_users_items() -> None:
    target = _isvc()
    patched = _applied_to(target, _writes(target))
    model = patched["spec"]["predictor"]["model"]
    assert model["args"] == [
        "--tensor-parallel-size=4",
        "--max-model-len=131072",
        "--enable-prefix-caching",
        "--kv-transfer-config",
        ARG,
    ]
    assert json.loads(model["args"][-1]) == CONFIG
    volumes = patched["spec"]["predictor"]["volumes"]
    assert volumes[0] == {"name": "chat-templates", "configMap": {"name": "llama-chat-templates"}}
    assert volumes[1] == {
        "name": DSHM_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": "260Gi"},
    }
    assert volumes[2]["name"] == KV_CACHE_VOLUME
    # No labels in the claim template: KServe's schema would prune them (and kvtier would
    # then see its write missing forever).
    assert volumes[2]["ephemeral"] == {"volumeClaimTemplate": {"spec": NVME_SPEC}}
    assert all("hostPath" not in v for v in volumes)


def test_isvc_read_without_a_generation_is_not_guarded() -> None:
    """An offline plan reads a manifest: there is no generation to guard by (and no write)."""
    target = _isvc()
    target["metadata"].pop("generation", None)
    assert _patch(target).guard is None


def test_isvc_absent_list_is_carried_with_kvtiers_items() -> None:
    target = _isvc()
    del target["spec"]["predictor"]["volumes"]
    write = _patch(target)
    assert [v["name"] for v in write.body["spec"]["predictor"]["volumes"]] == [
        DSHM_VOLUME,
        KV_CACHE_VOLUME,
    ]
    # No initContainers (neither the user's nor an evictor): none carried, none created.
    assert "initContainers" not in write.body["spec"]["predictor"]


def test_isvc_list_left_with_nothing_is_carried_empty() -> None:
    """The object holds only kvtier's items in a list kvtier no longer adds to: the apply
    carries it empty, so they go (leaving it out would not remove a co-owner's copy)."""
    target = _isvc()
    del target["spec"]["predictor"]["volumes"]
    applied = _applied_to(target, _writes(target))
    bare = _offload(disk=None, disk_label=None, plan=plan_offload(CONNECTOR, 256 * GiB, 0, None))
    volumes = _patch(applied, bare).body["spec"]["predictor"]["volumes"]
    assert volumes == []


def test_isvc_memory_is_user_plus_tier() -> None:
    resources = _patch(_isvc()).body["spec"]["predictor"]["model"]["resources"]
    assert resources == {"requests": {"memory": "580Gi"}, "limits": {"memory": "580Gi"}}


def test_isvc_cephfs_uses_shared_claim() -> None:
    offload = _offload(disk=SharedClaim("kvtier-x-cephfs"), disk_label="CephFS")
    patched = _applied_to(_isvc(), _writes(_isvc(), offload))
    assert patched["spec"]["predictor"]["volumes"][2] == {
        "name": KV_CACHE_VOLUME,
        "persistentVolumeClaim": {"claimName": "kvtier-x-cephfs"},
    }


def test_isvc_cpu_only_mounts_no_disk() -> None:
    writes = _writes(_isvc(), _offload(disk=None, disk_label=None))
    pred = _applied_to(_isvc(), writes)["spec"]["predictor"]
    assert [v["name"] for v in pred["volumes"]] == ["chat-templates", DSHM_VOLUME]
    assert writes[-1].body["spec"]["predictor"]["model"]["volumeMounts"] == [
        {"name": DSHM_VOLUME, "mountPath": "/dev/shm"}
    ]


def test_isvc_applied_target_needs_no_write() -> None:
    applied = _applied_to(_isvc(), _writes(_isvc()))
    assert pending_writes(_writes(applied), {object_key(applied): applied}) == []


def test_isvc_rerender_replaces_own_flag_not_the_users_args() -> None:
    applied = _applied_to(_isvc(), _writes(_isvc()))
    bigger = kv_transfer_config(300 * GiB, 16, "NVMe")
    offload = _offload(cpu_bytes=300 * GiB)  # the flag follows the CPU tier's one figure
    second = _writes(applied, offload)
    again = _applied_to(applied, second)
    args = again["spec"]["predictor"]["model"]["args"]
    assert args[:3] == _isvc()["spec"]["predictor"]["model"]["args"]
    assert args.count("--kv-transfer-config") == 1
    assert json.loads(args[-1]) == bigger
    assert again["spec"]["predictor"]["volumes"] == applied["spec"]["predictor"]["volumes"]
    assert _record(second[-1].body)["kvTransferConfig"] == args[-1]
    # Memory is added to the user's 64Gi, not to kvtier's previous 580Gi.
    resources = second[-1].body["spec"]["predictor"]["model"]["resources"]
    assert resources["requests"]["memory"] == "580Gi"


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1"}'],
        ['--kv-transfer-config={"kv_connector":"X"}'],
        ["--kv_transfer_config", "{}"],
    ],
)
def test_isvc_user_flag_is_a_conflict(args: list[str]) -> None:
    target = _isvc()
    target["spec"]["predictor"]["model"]["args"] += args
    result = target_patch(target, _offload())
    assert isinstance(result, Conflict)
    assert "--kv-transfer-config" in result.message


def test_isvc_without_model_is_unsupported() -> None:
    target = _isvc()
    target["spec"]["predictor"] = {"containers": [{"name": "kserve-container"}]}
    with pytest.raises(RenderError) as err:
        target_patch(target, _offload())
    assert err.value.reason == "UnsupportedTarget"


@pytest.mark.parametrize("secret", [None, "s3-keys"])
@pytest.mark.parametrize("dtype", [None, "fp8"])
@pytest.mark.parametrize("clear_stale", [False, True])
@pytest.mark.parametrize("seed", [None, "123"])
@pytest.mark.parametrize("load", [_isvc, _v1alpha1, _v1alpha2])
def test_unapply_gives_back_exactly_the_users_target(
    load: Any, seed: str | None, clear_stale: bool, dtype: str | None, secret: str | None
) -> None:
    original = load()
    offload = _offload(
        python_hash_seed=seed,
        clear_stale_shm_file=clear_stale,
        kv_cache_dtype=dtype,
        object_store_secret=secret,
    )
    applied = _applied_to(original, _writes(original, offload))
    assert applied != original
    container = applied["spec"]["predictor"]["model"] if load is _isvc else _main(applied)
    assert ("lifecycle" in container) is clear_stale  # the postStart hook, where asked
    if dtype is not None:  # kvtier passes the dtype it sized for, next to its own flag
        flags = container.get("args") or [
            e["value"] for e in container["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"
        ]
        assert "--kv-cache-dtype fp8 --kv-transfer-config" in " ".join(flags)
    assert _undone(applied) == original


def test_unapply_removes_lists_kvtier_created() -> None:
    original = _isvc()
    del original["spec"]["predictor"]["volumes"]
    del original["spec"]["predictor"]["model"]["args"]
    del original["spec"]["predictor"]["model"]["volumeMounts"]
    del original["spec"]["predictor"]["model"]["resources"]["requests"]  # only limits
    applied = _applied_to(original, _writes(original))
    assert applied["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] == "580Gi"
    assert _undone(applied) == original  # no empty requests map, no empty annotations


def test_unapply_ops_are_guarded() -> None:
    applied = _applied_to(_isvc(), _writes(_isvc()))
    ops = unapply_writes(applied)[0].body["jsonPatch"]
    # Every change is preceded by a test of what it changes.
    for i, op in enumerate(ops):
        if op["op"] != "test":
            assert ops[i - 1]["op"] == "test"
            assert op["path"].startswith(ops[i - 1]["path"].rsplit("/", 1)[0])
    # The user edits the memory meanwhile: the patch fails rather than overwrite it.
    raced = copy.deepcopy(applied)
    raced["spec"]["predictor"]["model"]["resources"]["requests"]["memory"] = "700Gi"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(raced, ops)


def test_unapply_of_untouched_target_writes_nothing() -> None:
    for target in (_isvc(), _v1alpha1(), _v1alpha2()):
        assert unapply_writes(target) == []


def _managed(target: dict[str, Any], manager: str, api_version: str, fields: Any) -> None:
    target["metadata"].setdefault("managedFields", []).append(
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    )


# --- LLMInferenceService v1alpha1 ---------------------------------------------------------------


def test_v1alpha1_appends_single_quoted_flag_to_additional_args() -> None:
    write = _patch(_v1alpha1(), _offload(python_hash_seed="123"))
    main = _main(write.body)
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["VLLM_ADDITIONAL_ARGS"] == f"--max-model-len 131072 --kv-transfer-config '{ARG}'"
    assert env["PYTHONHASHSEED"] == "123"
    assert set(write.body["spec"]) == {"template"}
    assert set(write.body["spec"]["template"]) == {"containers", "volumes"}
    assert [v["name"] for v in write.body["spec"]["template"]["volumes"]] == [
        DSHM_VOLUME,
        KV_CACHE_VOLUME,
    ]
    assert main["resources"] == {
        "requests": {"memory": "612Gi"},
        "limits": {"memory": "612Gi"},
    }


def test_v1alpha1_without_user_env_sets_only_the_flag() -> None:
    target = _v1alpha1()
    del _main(target)["env"]
    env = _main(_patch(target).body)["env"]
    assert env == [{"name": "VLLM_ADDITIONAL_ARGS", "value": f"--kv-transfer-config '{ARG}'"}]


def test_v1alpha1_rerender_and_unapply_restore_user_env() -> None:
    first = _patch(_v1alpha1())
    applied = _applied_to(_v1alpha1(), [first])
    second = _patch(applied)
    assert second.body == first.body  # stable: no flag appended twice, no memory creep
    assert _undone(applied) == _v1alpha1()


def test_v1alpha1_user_flag_in_env_is_a_conflict() -> None:
    target = _v1alpha1()
    _main(target)["env"][0]["value"] += " --kv-transfer-config '{}'"
    result = target_patch(target, _offload())
    assert isinstance(result, Conflict)
    assert "VLLM_ADDITIONAL_ARGS" in result.message


def test_v1alpha1_env_from_configmap_is_a_conflict() -> None:
    target = _v1alpha1()
    _main(target)["env"] = [
        {
            "name": "VLLM_ADDITIONAL_ARGS",
            "valueFrom": {"configMapKeyRef": {"name": "a", "key": "b"}},
        }
    ]
    assert isinstance(target_patch(target, _offload()), Conflict)


def test_user_hash_seed_is_kept() -> None:
    target = _v1alpha1()
    _main(target)["env"].append({"name": "PYTHONHASHSEED", "value": "7"})
    env = _main(_patch(target, _offload(python_hash_seed="123")).body)["env"]
    assert [e["name"] for e in env] == ["VLLM_ADDITIONAL_ARGS"]


def test_own_hash_seed_is_updated() -> None:
    first = _patch(_v1alpha1(), _offload(python_hash_seed="123"))
    applied = _applied_to(_v1alpha1(), [first])
    env = _main(_patch(applied, _offload(python_hash_seed="456")).body)["env"]
    assert {"name": "PYTHONHASHSEED", "value": "456"} in env


# --- LLMInferenceService v1alpha2 ---------------------------------------------------------------


def test_v1alpha2_native_field_with_per_pod_claim() -> None:
    body = _patch(_v1alpha2()).body
    assert body["apiVersion"] == "serving.kserve.io/v1alpha2"
    assert body["spec"]["kvCacheOffloading"] == {
        "cpu": "256Gi",
        "evictionPolicy": "lru",
        "secondary": [{"fileSystem": {"pvc": {"spec": NVME_SPEC}}}],
    }
    main = _main(body)
    assert "env" not in main  # KServe writes the flag itself
    assert main["volumeMounts"] == [{"name": DSHM_VOLUME, "mountPath": "/dev/shm"}]
    assert main["resources"]["requests"]["memory"] == "772Gi"
    assert body["spec"]["template"]["volumes"] == [
        {"name": DSHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "260Gi"}}
    ]


def test_v1alpha2_shared_claim_is_a_ref() -> None:
    offload = _offload(disk=SharedClaim("kvtier-n-cephfs"), disk_label="CephFS")
    native = _patch(_v1alpha2(), offload).body["spec"]["kvCacheOffloading"]
    assert native["secondary"] == [{"fileSystem": {"pvc": {"ref": {"name": "kvtier-n-cephfs"}}}}]


def test_v1alpha2_cpu_only_has_no_secondary() -> None:
    native = _patch(_v1alpha2(), _offload(disk=None)).body["spec"]["kvCacheOffloading"]
    assert native == {"cpu": "256Gi", "evictionPolicy": "lru"}


def test_v1alpha2_foreign_native_field_is_a_conflict() -> None:
    target = _v1alpha2()
    target["spec"]["kvCacheOffloading"] = {"cpu": "10Gi"}
    result = target_patch(target, _offload())
    assert isinstance(result, Conflict)
    assert "kvCacheOffloading" in result.message


def test_v1alpha2_own_native_field_is_updated() -> None:
    first = _patch(_v1alpha2())
    applied = _applied_to(_v1alpha2(), [first])
    applied["spec"]["kvCacheOffloading"] = first.body["spec"]["kvCacheOffloading"]
    native = _patch(applied, _offload(cpu_bytes=128 * GiB)).body["spec"]["kvCacheOffloading"]
    assert native["cpu"] == "128Gi"


def test_v1alpha2_written_by_a_v1alpha1_manager_gets_the_v1alpha1_form() -> None:
    # Converting to v1alpha1 drops kvCacheOffloading: each of their writes would remove
    # the native field, so kvtier passes the flag in VLLM_ADDITIONAL_ARGS instead.
    target = _v1alpha2()
    _managed(target, "argocd-controller", "serving.kserve.io/v1alpha1", {"f:spec": {"f:model": {}}})
    write = _patch(target)
    assert write.body["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert "kvCacheOffloading" not in write.body["spec"]
    env = {e["name"]: e["value"] for e in _main(write.body)["env"]}
    assert env["VLLM_ADDITIONAL_ARGS"].endswith(f"--kv-transfer-config '{ARG}'")
    assert _undone(_applied_to(target, [write])) == target


def test_v1alpha2_written_only_at_v1alpha2_keeps_the_native_field() -> None:
    target = _v1alpha2()
    _managed(target, "argocd-controller", "serving.kserve.io/v1alpha2", {"f:spec": {"f:model": {}}})
    _managed(target, "kvtier-operator", "serving.kserve.io/v1alpha1", {"f:spec": {"f:x": {}}})
    assert "kvCacheOffloading" in _patch(target).body["spec"]


def test_v1alpha2_user_flag_is_a_conflict() -> None:
    target = _v1alpha2()
    _main(target)["args"] = ["--kv-transfer-config", "{}"]
    assert isinstance(target_patch(target, _offload()), Conflict)


def test_unsupported_kind_or_version() -> None:
    target = _v1alpha2()
    target["apiVersion"] = "serving.kserve.io/v1alpha9"
    with pytest.raises(RenderError):
        target_patch(target, _offload())


# --- /dev/shm -----------------------------------------------------------------------------------


def test_existing_user_dshm_is_resized_and_restored() -> None:
    target = _isvc()
    pred = target["spec"]["predictor"]
    pred["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}})
    pred["model"]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    writes = _writes(target)
    volumes = _applied_to(target, writes)["spec"]["predictor"]["volumes"]
    assert volumes[1] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "260Gi"}}
    assert DSHM_VOLUME not in [v["name"] for v in volumes]
    mounts = writes[-1].body["spec"]["predictor"]["model"]["volumeMounts"]
    assert all(m["mountPath"] != "/dev/shm" for m in mounts)
    assert _record(writes[-1].body)["shm"] == {
        "volume": "dshm",
        "base": "2Gi",
        "applied": 260 * GiB,
    }
    assert _undone(_applied_to(target, writes)) == target


def test_non_memory_volume_at_dev_shm_is_a_conflict() -> None:
    target = _isvc()
    target["spec"]["predictor"]["model"]["volumeMounts"].append(
        {"name": "chat-templates", "mountPath": "/dev/shm"}
    )
    assert isinstance(target_patch(target, _offload()), Conflict)


def test_foreign_volume_at_cache_path_is_a_conflict() -> None:
    target = _isvc()
    target["spec"]["predictor"]["model"]["volumeMounts"].append(
        {"name": "chat-templates", "mountPath": "/mnt/kv-cache"}
    )
    assert isinstance(target_patch(target, _offload()), Conflict)


# --- memory arithmetic --------------------------------------------------------------------------


def test_memory_request_and_limit() -> None:
    add = 10 * GiB
    both = memory_for({"requests": {"memory": "8Gi"}, "limits": {"memory": "16Gi"}}, add, {})
    assert (both.request, both.limit) == (18 * GiB, 26 * GiB)
    only_request = memory_for({"requests": {"memory": "8Gi"}}, add, {})
    assert (only_request.request, only_request.limit) == (18 * GiB, None)
    only_limit = memory_for({"limits": {"memory": "16Gi"}}, add, {})
    assert (only_limit.request, only_limit.limit) == (26 * GiB, 26 * GiB)
    none = memory_for(None, add, {})
    assert (none.request, none.limit) == (add, None)
    decimal = memory_for({"requests": {"memory": "1G"}}, 0, {})
    assert decimal.request == 10**9


def test_memory_limit_never_below_request() -> None:
    # An inconsistent spec (limit < request) still yields limit >= request.
    odd = memory_for({"requests": {"memory": "32Gi"}, "limits": {"memory": "16Gi"}}, GiB, {})
    assert odd.limit is not None and odd.limit >= odd.request


def test_memory_changed_by_user_becomes_the_new_base() -> None:
    first = memory_for({"requests": {"memory": "8Gi"}}, GiB, {})
    # The user edited the request after kvtier applied 9Gi.
    later = memory_for({"requests": {"memory": "20Gi"}}, GiB, first.record)
    assert later.request == 21 * GiB
    # Unchanged since kvtier wrote it: the base stays 8Gi, in any spelling of 9Gi.
    again = memory_for({"requests": {"memory": str(9 * GiB)}}, 2 * GiB, first.record)
    assert again.request == 10 * GiB
