"""Oracle: kvtier's replica-1 CephFilesystem checked by Rook's own pool validation.

hack/oracles/rook/build compiles hack/oracles/rook/main.go against github.com/rook/rook
v1.17.2 and its nested module github.com/rook/rook/pkg/apis at the same tag commit, both from
the Go module proxy (CGO_ENABLED=0, a throwaway module in the kvtier cache, reused while
nothing changes). The harness decodes the object strictly into Rook's ceph.rook.io/v1 Go types
and runs pkg/operator/ceph/pool.ValidatePoolSpec on the metadata pool and every data pool, as
Rook's file system controller does before it creates any pool. No cluster is needed (it is
under tests/e2e only because it builds Go code).

v1.17.2 rather than the CRDs' v1.18.11: the proxy serves pkg/apis at no v1.18 commit, and the
validation this runs (pkg/operator/ceph/pool/validate.go, pkg/operator/ceph/file/validate.go)
is unchanged between the two tags. Any build failure fails these tests.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierSpec
from kvtier.settings import effective_settings
from kvtier.tiers.cephfs import replica1_filesystem

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "oracles" / "rook" / "build"


@pytest.fixture(scope="module")
def oracle() -> Path:
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{BUILD.name} failed:\n{proc.stderr[-4000:]}"
    return Path(proc.stdout.strip().splitlines()[-1])


def verdict(oracle: Path, obj: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    proc = subprocess.run(
        [str(oracle)], input=json.dumps(obj), capture_output=True, text=True, check=False
    )
    if proc.returncode == 2:
        return 2, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def kvtier_filesystem(**replica1: Any) -> dict[str, Any]:
    policy = KVCachePolicySpec.model_validate(
        {"cephfs": {"replica1": {"enabled": True, **replica1}}}
    )
    tier = KVCacheTierSpec.model_validate(
        {
            "targetRef": {"kind": "LLMInferenceService", "name": "x"},
            "workload": {"averageContextTokens": 1, "concurrentSessions": 1},
        }
    )
    return replica1_filesystem(effective_settings(tier, policy)).body


@pytest.mark.parametrize(
    "replica1",
    [{}, {"cephClusterNamespace": "rook-ceph", "filesystemName": "kvfs", "poolName": "kv"}],
    ids=["odf-defaults", "rook"],
)
def test_kvtiers_pools_pass_rooks_validation(oracle: Path, replica1: dict[str, Any]) -> None:
    code, out = verdict(oracle, kvtier_filesystem(**replica1))
    assert code == 0, out
    assert isinstance(out, dict) and out["valid"] is True
    pool = replica1.get("poolName", "kvcache")
    assert [p["pool"] for p in out["pools"]] == ["metadataPool", f"dataPools/{pool}"]


def test_a_size_one_pool_without_the_risk_accepted_is_refused(oracle: Path) -> None:
    # The harness really validates: the same object with requireSafeReplicaSize true.
    fs = copy.deepcopy(kvtier_filesystem())
    fs["spec"]["dataPools"][0]["replicated"]["requireSafeReplicaSize"] = True
    code, out = verdict(oracle, fs)
    assert code == 1 and isinstance(out, dict) and out["valid"] is False
    assert "requireSafeReplicaSize is true, must be false" in out["pools"][1]["error"]


def test_odf_additional_data_pools_cannot_carry_size_one(oracle: Path) -> None:
    # What ocs-operator makes of an additionalDataPools entry {size: 1}: it sets
    # replicasPerFailureDomain 1, and Rook wants the size greater than that.
    fs = copy.deepcopy(kvtier_filesystem())
    fs["spec"]["dataPools"][0]["replicated"]["replicasPerFailureDomain"] = 1
    code, out = verdict(oracle, fs)
    assert code == 1 and isinstance(out, dict)
    assert "size must be greater" in out["pools"][1]["error"]


def test_field_names_are_rooks(oracle: Path) -> None:
    # Decoding is strict: a field Rook's types lack (a typo kvtier made) is an error.
    fs = copy.deepcopy(kvtier_filesystem())
    fs["spec"]["dataPools"][0]["replicated"]["requireSafeReplicaSzie"] = False
    code, out = verdict(oracle, fs)
    assert code == 2 and "unknown field" in str(out)
