"""Model-server apply bodies: field-by-field per kind, conflicts, memory, removal."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.render.naming import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.targets import (
    APPLIED_ANNOTATION,
    Conflict,
    Offload,
    PerPodClaim,
    SharedClaim,
    memory_for,
    target_patch,
    unapply_body,
)
from kvtier.sizing import kv_transfer_config

TARGETS = Path(__file__).resolve().parents[2] / "examples" / "targets"
GiB = 1 << 30
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


def _offload(**changes: Any) -> Offload:
    base: dict[str, Any] = {
        "kv_transfer_config": CONFIG,
        "cpu_bytes": 256 * GiB,
        "pod_memory_bytes": 516 * GiB,
        "shm_bytes": 260 * GiB,
        "disk": PerPodClaim(spec=NVME_SPEC, labels={"kvcache.io/tier-id": "abc"}),
        "disk_label": "NVMe",
    }
    return Offload(**{**base, **changes})


def _patch(target: dict[str, Any], offload: Offload | None = None) -> DesiredWrite:
    result = target_patch(target, offload or _offload())
    assert isinstance(result, DesiredWrite), result
    return result


def _main(body: dict[str, Any]) -> dict[str, Any]:
    containers = body["spec"]["template"]["containers"]
    assert [c["name"] for c in containers] == ["main"]
    main: dict[str, Any] = containers[0]
    return main


def _record(body: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(body["metadata"]["annotations"][APPLIED_ANNOTATION])
    return record


def _applied_to(target: dict[str, Any], write: DesiredWrite) -> dict[str, Any]:
    """The target after a forced apply of `write` (enough of SSA for these fields)."""
    out = copy.deepcopy(target)
    out.setdefault("metadata", {}).setdefault("annotations", {}).update(
        write.body["metadata"]["annotations"]
    )
    if out["kind"] == "InferenceService":
        src, dst = write.body["spec"]["predictor"]["model"], out["spec"]["predictor"]["model"]
        dst["args"] = src["args"]
        dst.setdefault("resources", {}).setdefault("requests", {}).update(
            src["resources"]["requests"]
        )
        if "limits" in src["resources"]:
            dst["resources"].setdefault("limits", {}).update(src["resources"]["limits"])
    else:
        src = _main(write.body)
        dst = _main(out)
        for env in src.get("env", []):
            dst["env"] = [e for e in dst.get("env", []) if e["name"] != env["name"]] + [env]
        dst["resources"]["requests"].update(src["resources"]["requests"])
        if "limits" in src["resources"]:
            dst["resources"]["limits"].update(src["resources"]["limits"])
    return out


# --- InferenceService -------------------------------------------------------------------------


def test_isvc_body_has_only_owned_fields() -> None:
    write = _patch(_isvc())
    body = write.body
    assert (write.action, write.kind, write.name, write.namespace) == (
        "Apply",
        "InferenceService",
        "llama-3-1-70b",
        "llm",
    )
    assert body["apiVersion"] == "serving.kserve.io/v1beta1"
    assert set(body["metadata"]) == {"name", "namespace", "annotations"}
    assert set(body["spec"]) == {"predictor"}
    assert set(body["spec"]["predictor"]) == {"model", "volumes"}
    model = body["spec"]["predictor"]["model"]
    assert set(model) == {"args", "resources", "volumeMounts"}  # no env: one replica
    assert model["volumeMounts"] == [
        {"name": DSHM_VOLUME, "mountPath": "/dev/shm"},
        {"name": KV_CACHE_VOLUME, "mountPath": "/mnt/kv-cache"},
    ]


def test_isvc_keeps_user_args_and_appends_the_flag() -> None:
    model = _patch(_isvc()).body["spec"]["predictor"]["model"]
    assert model["args"] == [
        "--tensor-parallel-size=4",
        "--max-model-len=131072",
        "--enable-prefix-caching",
        "--kv-transfer-config",
        ARG,
    ]
    assert json.loads(model["args"][-1]) == CONFIG


def test_isvc_volumes_dshm_and_per_pod_claim() -> None:
    volumes = _patch(_isvc()).body["spec"]["predictor"]["volumes"]
    assert volumes[0] == {
        "name": DSHM_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": "260Gi"},
    }
    assert volumes[1]["name"] == KV_CACHE_VOLUME
    template = volumes[1]["ephemeral"]["volumeClaimTemplate"]
    assert template["spec"] == NVME_SPEC
    assert template["metadata"]["labels"] == {"kvcache.io/tier-id": "abc"}
    assert all("hostPath" not in v for v in volumes)


def test_isvc_memory_is_user_plus_tier() -> None:
    resources = _patch(_isvc()).body["spec"]["predictor"]["model"]["resources"]
    assert resources == {"requests": {"memory": "580Gi"}, "limits": {"memory": "580Gi"}}


def test_isvc_cephfs_uses_shared_claim() -> None:
    write = _patch(_isvc(), _offload(disk=SharedClaim("kvtier-x-cephfs"), disk_label="CephFS"))
    volumes = write.body["spec"]["predictor"]["volumes"]
    assert volumes[1] == {
        "name": KV_CACHE_VOLUME,
        "persistentVolumeClaim": {"claimName": "kvtier-x-cephfs"},
    }


def test_isvc_cpu_only_mounts_no_disk() -> None:
    write = _patch(_isvc(), _offload(disk=None, disk_label=None))
    pred = write.body["spec"]["predictor"]
    assert [v["name"] for v in pred["volumes"]] == [DSHM_VOLUME]
    assert pred["model"]["volumeMounts"] == [{"name": DSHM_VOLUME, "mountPath": "/dev/shm"}]


def test_isvc_rerender_replaces_own_flag_not_the_users_args() -> None:
    first = _patch(_isvc())
    applied = _applied_to(_isvc(), first)
    bigger = kv_transfer_config(300 * GiB, 16, "NVMe")
    second = _patch(applied, _offload(kv_transfer_config=bigger, cpu_bytes=300 * GiB))
    args = second.body["spec"]["predictor"]["model"]["args"]
    assert args[:3] == _isvc()["spec"]["predictor"]["model"]["args"]
    assert args.count("--kv-transfer-config") == 1
    assert json.loads(args[-1]) == bigger
    # Memory is added to the user's 64Gi, not to kvtier's previous 580Gi.
    resources = second.body["spec"]["predictor"]["model"]["resources"]
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


def test_isvc_unapply_restores_user_args_and_memory() -> None:
    applied = _applied_to(_isvc(), _patch(_isvc()))
    body = unapply_body(applied)
    assert body == {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llama-3-1-70b", "namespace": "llm"},
        "spec": {
            "predictor": {
                "model": {
                    "args": [
                        "--tensor-parallel-size=4",
                        "--max-model-len=131072",
                        "--enable-prefix-caching",
                    ],
                    "resources": {"requests": {"memory": "64Gi"}, "limits": {"memory": "64Gi"}},
                }
            }
        },
    }


def test_unapply_of_untouched_target_is_identity_only() -> None:
    for target in (_isvc(), _v1alpha1(), _v1alpha2()):
        body = unapply_body(target)
        assert set(body) == {"apiVersion", "kind", "metadata"}
        assert body["metadata"] == {
            "name": target["metadata"]["name"],
            "namespace": target["metadata"]["namespace"],
        }


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
    applied = _applied_to(_v1alpha1(), first)
    second = _patch(applied)
    assert second.body == first.body  # stable: no flag appended twice, no memory creep
    body = unapply_body(applied)
    main = _main(body)
    assert main["env"] == [{"name": "VLLM_ADDITIONAL_ARGS", "value": "--max-model-len 131072"}]
    assert main["resources"] == {"requests": {"memory": "96Gi"}, "limits": {"memory": "96Gi"}}
    assert "volumes" not in body["spec"]["template"]


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
    applied = _applied_to(_v1alpha1(), first)
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
    applied = _applied_to(_v1alpha2(), first)
    applied["spec"]["kvCacheOffloading"] = first.body["spec"]["kvCacheOffloading"]
    assert isinstance(target_patch(applied, _offload(cpu_bytes=128 * GiB)), DesiredWrite)


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
    write = _patch(target)
    body_pred = write.body["spec"]["predictor"]
    assert body_pred["volumes"][0] == {
        "name": "dshm",
        "emptyDir": {"medium": "Memory", "sizeLimit": "260Gi"},
    }
    assert {"mountPath": "/dev/shm"} not in body_pred["model"]["volumeMounts"]
    assert all(m["mountPath"] != "/dev/shm" for m in body_pred["model"]["volumeMounts"])
    assert _record(write.body)["shm"] == {"volume": "dshm", "base": "2Gi", "applied": 260 * GiB}
    applied = _applied_to(target, write)
    assert unapply_body(applied)["spec"]["predictor"]["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    ]


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
