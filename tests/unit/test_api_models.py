"""The CR models parse the examples and enforce the same rules as admission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from kvtier.api import KVCachePolicy, KVCacheTier, KVCacheTierStatus, quantity_bytes
from kvtier.api.tier import DiskType, Mode, Topology
from kvtier.names import API_VERSION

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODELS: dict[str, type[BaseModel]] = {"KVCacheTier": KVCacheTier, "KVCachePolicy": KVCachePolicy}


def _tier(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "targetRef": {"kind": "LLMInferenceService", "name": "llm"},
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
    }
    return {"apiVersion": API_VERSION, "kind": "KVCacheTier", "spec": {**base, **spec}}


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert {
        "kvcachetier.yaml",
        "kvcachetier-llama70b-nvme.yaml",
        "kvcachetier-gptoss-cephfs.yaml",
        "kvcachepolicy.yaml",
    } <= names


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_parses_and_round_trips(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        model = MODELS[document["kind"]].model_validate(document)
        # camelCase on the wire, nothing lost or invented.
        assert model.model_dump(mode="json", exclude_none=True) == document


def test_nemotron_example_is_plan_mode_on_llm_inference_service() -> None:
    tier = KVCacheTier.model_validate(yaml.safe_load((EXAMPLES / "kvcachetier.yaml").read_text()))
    assert tier.spec.mode is Mode.PLAN
    assert tier.spec.target_ref.kind == "LLMInferenceService"
    assert tier.spec.model is not None and tier.spec.model.geometry is not None
    assert tier.spec.model.geometry.attention_layers == 64


def test_api_version_constant_matches_literal() -> None:
    assert KVCacheTier.model_fields["api_version"].default == API_VERSION
    assert KVCachePolicy.model_fields["api_version"].default == API_VERSION


@pytest.mark.parametrize(
    ("value", "expected"),
    [("64Gi", 64 * 2**30), ("10Ti", 10 * 2**40), ("205M", 205_000_000), (1024, 1024), ("1.5", 2)],
)
def test_quantity_bytes(value: int | str, expected: int) -> None:
    assert quantity_bytes(value) == expected


@pytest.mark.parametrize("size", ["auto", "64Gi", 68719476736, "1e12"])
def test_cpu_size_accepts_auto_and_quantities(size: int | str) -> None:
    assert KVCacheTier.model_validate(_tier(cpu={"size": size})).spec.cpu is not None


@pytest.mark.parametrize("size", ["lots", "0", 0, -1, " 1Gi", "1gi", True, "Auto"])
def test_cpu_size_rejects_non_quantities(size: object) -> None:
    with pytest.raises(ValidationError, match="cpu"):
        KVCacheTier.model_validate(_tier(cpu={"size": size}))


def test_geometry_all_or_none() -> None:
    full = {"attentionLayers": 80, "kvHeads": 8, "headDim": 128}
    assert KVCacheTier.model_validate(_tier(model={"geometry": full}))
    assert KVCacheTier.model_validate(_tier(model={"geometry": {}}))
    with pytest.raises(ValidationError, match="all three"):
        KVCacheTier.model_validate(_tier(model={"geometry": {"kvHeads": 8}}))


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError, match="extra"):
        KVCacheTier.model_validate(_tier(disk={"type": "NVMe", "nvme": {"path": "/mnt"}}))


def test_auto_disk_may_carry_nvme_and_cephfs_preferences() -> None:
    disk = {"type": "Auto", "nvme": {"pool": "local-nvme"}, "cephfs": {"size": "10Ti"}}
    spec = KVCacheTier.model_validate(_tier(disk=disk)).spec
    assert spec.disk is not None and spec.disk.type is DiskType.AUTO


def test_object_store_with_acknowledgement_parses() -> None:
    store = {
        "acknowledgeTailLatency": True,
        "bucket": "kv-cache",
        "endpoint": "https://s3.example.com",
    }
    assert KVCacheTier.model_validate(_tier(disk={"type": "ObjectStore", "objectStore": store}))


def test_object_store_needs_its_bucket_and_endpoint() -> None:
    disk = {"type": "ObjectStore", "objectStore": {"acknowledgeTailLatency": True}}
    with pytest.raises(ValidationError, match=r"bucket and spec\.disk\.objectStore\.endpoint"):
        KVCacheTier.model_validate(_tier(disk=disk))


def test_python_names_and_wire_names_both_validate() -> None:
    by_alias = KVCacheTier.model_validate(_tier(probe={"baselineTTFTSeconds": 60}))
    assert by_alias.spec.probe is not None and by_alias.spec.probe.baseline_ttft_seconds == 60
    assert by_alias.to_k8s()["spec"]["probe"] == {"baselineTTFTSeconds": 60.0}


def test_status_shape_parses_and_serialises_camel_case() -> None:
    status = {
        "observedGeneration": 3,
        "cpuTier": "128Gi",
        "diskTier": "NVMe 2Ti",
        "sizing": {
            "bytesPerToken": 262144,
            "bytesPerTokenPerRank": 32768,
            "blockBytes": 4194304,
            "workingSetBytes": 838860800000,
            "cpuBytesToUse": 137438953472,
            "fitsInCPU": False,
            "contextsInCPU": 10.5,
            "topology": "CPUAndNVMe",
        },
        "tiers": [
            {
                "name": "nvme",
                "ready": True,
                "capacityBytes": 2199023255552,
                "claimName": "nemotron-nvme",
                "probe": {
                    "p50Seconds": 0.004,
                    "p99Seconds": 0.02,
                    "bandwidthBytesPerSecond": 2000000000,
                    "measuredAt": "2025-01-01T00:00:00Z",
                    "buffered": False,
                },
                "crossoverTokens": 4000,
                "restoreBlocksPerSecond": 400.0,
                "beneficial": True,
            }
        ],
        "plan": {
            "summary": "CPU 128Gi + NVMe 2Ti",
            "actions": [
                {
                    "action": "Patch",
                    "apiVersion": "serving.kserve.io/v1alpha2",
                    "kind": "LLMInferenceService",
                    "name": "nemotron-ultra",
                    "namespace": "llm",
                    "summary": "add kvCacheOffloading",
                    "body": {"spec": {"kvCacheOffloading": {"cpu": "128Gi"}}},
                }
            ],
        },
        "effective": [{"field": "mode", "value": "Plan", "source": "Tier"}],
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Planning",
                "message": "Plan mode",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
    }
    parsed = KVCacheTierStatus.model_validate(status)
    assert parsed.sizing is not None and parsed.sizing.topology is Topology.CPU_AND_NVME
    dumped = parsed.to_k8s()
    assert dumped["sizing"]["fitsInCPU"] is False
    assert dumped["tiers"][0]["probe"]["p99Seconds"] == 0.02
    assert dumped["conditions"][0]["lastTransitionTime"] == "2025-01-01T00:00:00Z"


def test_policy_must_be_named_cluster() -> None:
    assert KVCachePolicy.model_validate({"metadata": {"name": "cluster"}})
    with pytest.raises(ValidationError, match="named 'cluster'"):
        KVCachePolicy.model_validate({"metadata": {"name": "default"}})


@pytest.mark.parametrize("path", ["/mnt/nvme", "/var/mnt/nvme0", "/mnt/..x"])
def test_pool_mount_path_accepts_clean_absolute_paths(path: str) -> None:
    pool = {"name": "p", "mountPath": path, "capacityPerNode": "1Ti"}
    assert KVCachePolicy.model_validate({"spec": {"nvmePools": [pool]}})


@pytest.mark.parametrize("path", ["mnt", "/", "/mnt/", "/mnt//x", "/mnt/../x", "/mnt/.", "/./a"])
def test_pool_mount_path_rejects_unclean_paths(path: str) -> None:
    pool = {"name": "p", "mountPath": path, "capacityPerNode": "1Ti"}
    with pytest.raises(ValidationError, match="mountPath"):
        KVCachePolicy.model_validate({"spec": {"nvmePools": [pool]}})
