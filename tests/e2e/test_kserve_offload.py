"""Oracle: what KServe's own LLMInferenceService controller renders for the
spec.kvCacheOffloading kvtier writes, against kvtier's own `--kv-transfer-config` for the same
tier (the flag it passes to InferenceService v1beta1 and LLMInferenceService v1alpha1).

hack/oracles/kserve/build compiles hack/oracles/kserve/main.go against github.com/kserve/kserve
v0.20.0 (CGO_ENABLED=0, a throwaway module in the kvtier cache, reused while nothing changes).
The harness runs KServe's admission validation and its LLMISVCReconciler.Reconcile on a fake
client holding the object plus KServe's shipped inferenceservice-config and
LLMInferenceServiceConfig presets, then runs the Deployment's own bash command with a stub
`vllm` to get the argv vLLM would see: ReplaceVariables's kvTransferConfig template function
makes the flag (config_merge.go), attachKVCacheSecondaryTiers the volumes and mounts
(workload_kvcache.go). No cluster is needed (it is under tests/e2e because it builds Go code,
like the Rook oracle); a failed build fails these tests, they never skip.

Each difference between the two renderings is listed in EXPECTED_DIFFERENCES with its reason
(README: "kvtier's flag vs KServe's native rendering"); any other difference, or one of these
going away, fails the test.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.names.objects import DSHM_VOLUME, KV_CACHE_VOLUME
from kvtier.names.objects import EVICTOR_CONTAINER as EVICTOR
from kvtier.render.evictor import EvictorSettings
from kvtier.sizing import ConnectorSettings
from kvtier.targets.offload import Offload, plan_offload
from kvtier.targets.pod import KV_FLAG
from kvtier.targets.registry import target_patch
from kvtier.tiers.base import PerPodClaim, SharedClaim

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "oracles" / "kserve" / "build"
TARGETS = REPO / "examples" / "targets"
GiB = 1 << 30
# The study's vLLM; KServe's template passes its flag only when `vllm --version` is 0.22.0+.
VLLM = "0.24.0"
FS_ROOT = "/mnt/kv-cache"  # kvtier's default fs_root_dir and disk mount path
NVME_SPEC = {
    "accessModes": ["ReadWriteOnce"],
    "storageClassName": "kvtier-nvme-local-nvme",
    "resources": {"requests": {"storage": "1Ti"}},
    "selector": {"matchLabels": {"kvcache.io/tier-id": "abc"}},
}
CEPHFS_CLAIM = "kvtier-nemotron-cephfs"
EXTRA = "kv_connector_extra_config"

Missing = None  # a key one side does not write at all (rendered as "absent" in the table)

# The first build downloads KServe's module graph and compiles it (minutes on a fresh cache).
pytestmark = pytest.mark.timeout(1800)


@dataclass(frozen=True)
class Difference:
    path: str  # a key of the flattened --kv-transfer-config
    kvtier: Any  # kvtier's flag (v1beta1 args / v1alpha1 VLLM_ADDITIONAL_ARGS)
    kserve: Any  # KServe's rendering of spec.kvCacheOffloading
    why: str


# Every way the two renderings of one tier differ, per tier shape. Mount paths and volumes
# are checked separately (test_disk_tier_volume_and_mount): KServe mounts secondary tier i
# from volume kv-cache-secondary-<i> at /mnt/kv-cache-<i>, kvtier from kvtier-kv-cache at
# /mnt/kv-cache.
BLOCK_SIZE = Difference(
    f"{EXTRA}.block_size",
    16,
    Missing,
    "spec.kvCacheOffloading has no block size: vLLM uses the GPU block size (16 by default), "
    "the size kvtier's sizing assumes unless a tier sets another block_tokens",
)
ROOT_DIR = Difference(
    f"{EXTRA}.secondary_tiers.0.root_dir",
    FS_ROOT,
    "/mnt/kv-cache-0",
    "KServe mounts secondary tier i at /mnt/kv-cache-<i>; kvtier's status.plan shows "
    "/mnt/kv-cache for a v1alpha2 target, which should align",
)
READ_THREADS = Difference(
    f"{EXTRA}.secondary_tiers.0.n_read_threads",
    16,
    Missing,
    "no thread counts in spec.kvCacheOffloading: vLLM's fs-tier defaults apply",
)
WRITE_THREADS = Difference(
    f"{EXTRA}.secondary_tiers.0.n_write_threads",
    16,
    Missing,
    "no thread counts in spec.kvCacheOffloading: vLLM's fs-tier defaults apply",
)
CPU_SPEC_NAME = Difference(
    f"{EXTRA}.spec_name",
    "CPUOffloadingSpec",
    "TieringOffloadingSpec",
    "KServe renders TieringOffloadingSpec also with no secondary tier; kvtier passes the "
    "plain CPU spec, which exists since before 0.22",
)
CPU_LRU = Difference(
    f"{EXTRA}.eviction_policy",
    Missing,
    "lru",
    "kvtier leaves vLLM's default lru out of a CPU-only flag; KServe writes the field's "
    "value (CRD default lru): the same policy",
)
DISK_DIFFERENCES = (BLOCK_SIZE, ROOT_DIR, READ_THREADS, WRITE_THREADS)
EXPECTED_DIFFERENCES: dict[str, tuple[Difference, ...]] = {
    "nvme": DISK_DIFFERENCES,
    "cephfs": DISK_DIFFERENCES,
    "cpu-only": (CPU_SPEC_NAME, BLOCK_SIZE, CPU_LRU),
    "cpu-only-arc": (CPU_SPEC_NAME, BLOCK_SIZE),
}


@dataclass(frozen=True)
class Case:
    cpu_bytes: int
    disk: SharedClaim | PerPodClaim | None
    eviction: str = "lru"
    replicas: int = 1

    @property
    def disk_type(self) -> str | None:
        if self.disk is None:
            return None
        return "CephFS" if isinstance(self.disk, SharedClaim) else "NVMe"

    def connector(self) -> ConnectorSettings:
        return ConnectorSettings(
            16, self.disk_type, eviction_policy=self.eviction, fs_root_dir=FS_ROOT
        )

    def config(self) -> dict[str, Any]:
        """kvtier's --kv-transfer-config for the tier (sizing, as Plan and the flag forms)."""
        return self.connector().kv_transfer_config(self.cpu_bytes)

    def offload(self) -> Offload:
        return Offload(
            plan=plan_offload(
                self.connector(), self.cpu_bytes, 2 * self.cpu_bytes, self.cpu_bytes + 4 * GiB
            ),
            disk=self.disk,
            disk_label=self.disk_type,
            eviction_policy=self.eviction,
            mount_path=FS_ROOT,
            python_hash_seed="1234" if self.replicas > 1 else None,
        )


CASES = {
    # An exact GiB count and an odd byte count: Quantity.Value() must give kvtier's bytes.
    "nvme": Case(256 * GiB, PerPodClaim(spec=NVME_SPEC)),
    "cephfs": Case(123_456_789_012, SharedClaim(CEPHFS_CLAIM), replicas=3),
    "cpu-only": Case(64 * GiB, None),
    "cpu-only-arc": Case(64 * GiB, None, eviction="arc"),
}


@pytest.fixture(scope="module")
def oracle() -> Path:
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, (
        f"{BUILD.relative_to(REPO)} failed (exit {proc.returncode}); the KServe oracle must "
        f"build for this test:\n{proc.stderr[-4000:]}"
    )
    return Path(proc.stdout.strip().splitlines()[-1])


def render(oracle: Path, obj: Mapping[str, Any], vllm: str = VLLM) -> dict[str, Any]:
    proc = subprocess.run(
        [str(oracle), "-vllm-version", vllm],
        input=json.dumps(obj),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["kserveVersion"] == "v0.20.0"
    assert out["validation"].get("error") is None, out["validation"]
    # Without a real gateway only the router part may fail, after the workloads exist.
    for err in out["reconcileErrors"]:
        assert "failed to reconcile networking" in err, out["reconcileErrors"]
    return out


def main_container(out: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the workload, its `main` container) of the single-node Deployment."""
    [workload] = [w for w in out["workloads"] if w["kind"] == "Deployment"]
    [main] = [c for c in workload["containers"] if c["name"] == "main"]
    assert not main.get("vllmError"), main.get("vllmError")
    return workload, main


# --- the objects kvtier writes ------------------------------------------------------------------


# The keyed lists of KServe's LLMInferenceService schema (x-kubernetes-list-map-keys).
LIST_KEYS = {"containers": "name", "volumes": "name", "env": "name", "volumeMounts": "mountPath"}


def applied(target: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """The target after server-side apply of kvtier's body: maps merged, the keyed lists of
    KServe's LLMInferenceService schema merged by key, everything else replaced."""

    def merge(dst: dict[str, Any], src: Mapping[str, Any]) -> None:
        for k, v in src.items():
            key = LIST_KEYS.get(k)
            if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            elif key and isinstance(v, list) and isinstance(dst.get(k), list):
                for item in v:
                    same = next((i for i in dst[k] if i.get(key) == item.get(key)), None)
                    if same is None:
                        dst[k].append(copy.deepcopy(item))
                    else:
                        merge(same, item)
            else:
                dst[k] = copy.deepcopy(v)

    out = copy.deepcopy(dict(target))
    merge(out, body)
    out["apiVersion"] = body["apiVersion"]
    return out


def nemotron(case: Case, version: str = "v1alpha2") -> tuple[dict[str, Any], dict[str, Any]]:
    """(kvtier's apply body, the object after it) for examples/targets/nemotron-llmisvc.yaml."""
    target = yaml.safe_load((TARGETS / "nemotron-llmisvc.yaml").read_text())
    target["apiVersion"] = f"serving.kserve.io/{version}"
    target["spec"]["replicas"] = case.replicas
    writes = target_patch(target, case.offload())
    assert isinstance(writes, list), writes
    body = writes[-1].body
    assert body["apiVersion"] == f"serving.kserve.io/{version}"
    return body, applied(target, body)


def isvc_flag(case: Case) -> str:
    """kvtier's --kv-transfer-config value in the InferenceService v1beta1 args."""
    target = yaml.safe_load((TARGETS / "llama70b-isvc.yaml").read_text())
    writes = target_patch(target, case.offload())
    assert isinstance(writes, list), writes
    (write,) = writes  # one apply, which carries the args whole
    args = write.body["spec"]["predictor"]["model"]["args"]
    assert args[-2] == KV_FLAG
    value: str = args[-1]
    return value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    items: list[tuple[str, Any]]
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(kvtier: Any, kserve: Any) -> set[tuple[str, Any, Any]]:
    a, b = flatten(kvtier), flatten(kserve)
    return {(p, a.get(p), b.get(p)) for p in a.keys() | b.keys() if a.get(p) != b.get(p)}


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_flag_agrees_but_for_the_listed_differences(oracle: Path, name: str) -> None:
    case = CASES[name]
    body, obj = nemotron(case)
    native = body["spec"]["kvCacheOffloading"]
    assert native["evictionPolicy"] == case.eviction
    _, main = main_container(render(oracle, obj))
    assert main["vllmArgv"].count(KV_FLAG) == 1, main["vllmArgv"]
    kserve = main["kvTransferConfig"]
    ours = json.loads(isvc_flag(case))
    assert ours == case.config()

    # What must agree.
    assert kserve["kv_connector"] == ours["kv_connector"] == "OffloadingConnector"
    assert kserve["kv_role"] == ours["kv_role"] == "kv_both"
    assert kserve[EXTRA]["cpu_bytes_to_use"] == ours[EXTRA]["cpu_bytes_to_use"] == case.cpu_bytes
    assert kserve[EXTRA]["eviction_policy"] == ours[EXTRA].get("eviction_policy", "lru")
    if case.disk is not None:
        assert kserve[EXTRA]["spec_name"] == ours[EXTRA]["spec_name"] == "TieringOffloadingSpec"
        ours_tiers, kserve_tiers = ours[EXTRA]["secondary_tiers"], kserve[EXTRA]["secondary_tiers"]
        assert [t["type"] for t in kserve_tiers] == [t["type"] for t in ours_tiers] == ["fs"]
    else:
        assert "secondary_tiers" not in kserve[EXTRA]

    expected = {(d.path, d.kvtier, d.kserve) for d in EXPECTED_DIFFERENCES[name]}
    assert differences(ours, kserve) == expected


@pytest.mark.parametrize("name", ["nvme", "cephfs"])
def test_disk_tier_volume_and_mount(oracle: Path, name: str) -> None:
    """KServe mounts the same claim kvtier provisions, at the root_dir of its own flag; kvtier's
    flag forms mount it at theirs."""
    case = CASES[name]
    _, obj = nemotron(case)
    workload, main = main_container(render(oracle, obj))
    root = main["kvTransferConfig"][EXTRA]["secondary_tiers"][0]["root_dir"]
    [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == root]
    assert mount["name"] == "kv-cache-secondary-0" and root == "/mnt/kv-cache-0"
    assert not mount.get("subPath")
    [volume] = [v for v in workload["volumes"] if v["name"] == mount["name"]]
    template = volume.get("ephemeral", {}).get("volumeClaimTemplate", {})
    if template.get("metadata") == {}:  # Go's empty ObjectMeta, no field set
        del template["metadata"]
    if isinstance(case.disk, SharedClaim):
        assert volume["persistentVolumeClaim"] == {"claimName": CEPHFS_CLAIM}
    else:
        assert volume["ephemeral"] == {"volumeClaimTemplate": {"spec": NVME_SPEC}}
    assert not any(v["name"] == KV_CACHE_VOLUME for v in workload["volumes"])

    # kvtier's own flag form (v1alpha1) of the same tier: the same claim, its own name and path.
    body, _ = nemotron(case, "v1alpha1")
    [ours] = [v for v in body["spec"]["template"]["volumes"] if v["name"] == KV_CACHE_VOLUME]
    assert {k: v for k, v in ours.items() if k != "name"} == {
        k: v for k, v in volume.items() if k != "name"
    }
    [own_main] = body["spec"]["template"]["containers"]
    assert {"name": KV_CACHE_VOLUME, "mountPath": FS_ROOT} in own_main["volumeMounts"]
    assert case.config()[EXTRA]["secondary_tiers"][0]["root_dir"] == FS_ROOT


def test_kserve_keeps_the_nvme_evictor_on_the_volume_it_mounts(oracle: Path) -> None:
    """The native sidecar kvtier puts in an NVMe tier's decode template: KServe's controller
    keeps it in the Deployment's pod as a restartable init container, on the volume and at
    the path it mounts for vLLM's fs tier (which only exist in the pod KServe renders)."""
    evictor = EvictorSettings(image="kvtier:test", capacity_bytes=1 << 40, block_bytes=5 << 20)
    offload = replace(CASES["nvme"].offload(), evictor=evictor)
    target = yaml.safe_load((TARGETS / "nemotron-llmisvc.yaml").read_text())
    writes = target_patch(target, offload)
    assert isinstance(writes, list), writes
    workload, main = main_container(render(oracle, applied(target, writes[-1].body)))
    [sidecar] = [c for c in workload["initContainers"] if c["name"] == EVICTOR]
    assert sidecar["restartPolicy"] == "Always"
    [mount] = sidecar["volumeMounts"]
    root = main["kvTransferConfig"][EXTRA]["secondary_tiers"][0]["root_dir"]
    assert mount in main["volumeMounts"] and mount["mountPath"] == root
    [volume] = [v for v in workload["volumes"] if v["name"] == mount["name"]]
    assert volume["ephemeral"]["volumeClaimTemplate"]["spec"] == NVME_SPEC


@pytest.mark.parametrize("name", CASES)
def test_kvtiers_memory_shm_and_seed_survive_kserves_presets(oracle: Path, name: str) -> None:
    """KServe raises neither memory nor /dev/shm for the tier: what kvtier adds in
    spec.template is what the Deployment gets (kvtier's /dev/shm volume replaces the preset's
    1Gi `dshm` mount by mountPath; the preset's volume stays, unmounted)."""
    case = CASES[name]
    body, obj = nemotron(case)
    workload, main = main_container(render(oracle, obj))
    [ours] = body["spec"]["template"]["containers"]
    for kind in ("requests", "limits"):
        assert main["resources"][kind]["memory"] == ours["resources"][kind]["memory"]
    [shm] = [m for m in main["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert shm["name"] == DSHM_VOLUME
    [vol] = [v for v in workload["volumes"] if v["name"] == DSHM_VOLUME]
    assert vol["emptyDir"]["medium"] == "Memory"
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env.get("PYTHONHASHSEED") == ("1234" if case.replicas > 1 else None)


@pytest.mark.parametrize("name", ["nvme", "cpu-only"])
def test_kvtiers_flag_form_reaches_vllm_through_kserves_template(oracle: Path, name: str) -> None:
    """kvtier's v1alpha1 form (the flag single-quoted in VLLM_ADDITIONAL_ARGS), converted by
    KServe to v1alpha2 and run by its template's `eval`: vLLM gets exactly kvtier's JSON, once."""
    case = CASES[name]
    _, obj = nemotron(case, "v1alpha1")
    _, main = main_container(render(oracle, obj))
    assert main["vllmArgv"].count(KV_FLAG) == 1, main["vllmArgv"]
    assert main["kvTransferConfig"] == case.config()
    assert "--max-model-len" in main["vllmArgv"]  # the user's own args stay


def test_kserve_renders_no_flag_for_vllm_before_0_22(oracle: Path) -> None:
    """KServe's template gates its flag on `vllm --version` >= 0.22.0 (OffloadingConnector's
    tiering); kvtier's flag forms do not depend on the image's version."""
    _, obj = nemotron(CASES["nvme"])
    _, main = main_container(render(oracle, obj, vllm="0.21.0"))
    assert KV_FLAG not in main["vllmArgv"]
    assert main["kvTransferConfig"] is None
    # The volume is still mounted: KServe's workload code has no version gate.
    assert any(m["mountPath"] == "/mnt/kv-cache-0" for m in main["volumeMounts"])


def test_readme_lists_the_differences() -> None:
    """README's "kvtier's flag vs KServe's native rendering" names every expected difference."""
    text = (REPO / "README.md").read_text()
    title = "### kvtier's flag vs KServe's native rendering\n"
    assert title in text
    section = text.split(title, 1)[1].split("\n#", 1)[0]
    for diffs in EXPECTED_DIFFERENCES.values():
        for d in diffs:
            assert f"`{d.path.rsplit('.', 1)[-1]}`" in section, d.path
            for value in (d.kvtier, d.kserve):
                assert value is Missing or str(value) in section, (d.path, value)
