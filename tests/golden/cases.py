"""The golden cases: every target kind × tier type × vLLM release × role shape, plus one case
per refusal, each decided once in Apply mode by `kvtier.policy.decide.decide`.

Every case's Facts come from `facts(case)` and nowhere else. The objects in them are the unit
tests' own builders (tests/unit) and the examples: a change to those changes the goldens too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvtier.policy.contract import Facts
from kvtier.sizing.releases import DEFAULT_VLLM_VERSION, RELEASES
from tests.served_schemas import schemas_for
from tests.unit.test_decide import node, tier
from tests.unit.test_render_roles import multi_node_dp, multi_node_pp, prefill_decode
from tests.unit.test_render_targets import _isvc, _managed
from tests.unit.test_render_writes import _yaml
from tests.unit.test_target_apps import SERVE
from tests.unit.test_target_apps import deployment as workload
from tests.unit.test_target_lws import lws

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
TIER_UID = "00000000-0000-4000-8000-000000000001"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}  # the example pools' selector


def _fit_context(args: list[str]) -> None:
    """The cases' average context (50000 tokens) within the server's --max-model-len, as in
    the other forms: a longer one is refused (ContextExceedsMaxModelLen)."""
    for i, arg in enumerate(args[:-1]):
        if arg == "--max-model-len" and int(args[i + 1]) < 50000:
            args[i + 1] = "131072"


def _node(name: str) -> dict[str, Any]:
    """test_decide's 8-GPU node in the example pools, with its LVM Storage topology label."""
    body = node(name)
    body["metadata"]["labels"].update(H100, **{"topology.topolvm.io/node": name})
    return body


NODES = [_node(f"gpu-node-{i}") for i in (1, 2, 3)]
# The example policy's StorageClass pool (lvms-nvme) and what its driver reports per node.
STORAGE_CLASSES = {
    "lvms-vg1": {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "lvms-vg1"},
        "provisioner": "topolvm.io",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
}
CAPACITIES = [
    {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": f"csisc-gpu-node-{i}", "namespace": "openshift-storage"},
        "storageClassName": "lvms-vg1",
        "nodeTopology": {"matchLabels": {"topology.topolvm.io/node": f"gpu-node-{i}"}},
        "capacity": "7Ti",
    }
    for i in (1, 2, 3)
]

LLMISVC = "serving.kserve.io/v1alpha"
# Target forms: (apiVersion of the object, apiVersion another manager writes it in).
TARGETS: dict[str, tuple[str, str | None]] = {
    "isvc-v1beta1": ("serving.kserve.io/v1beta1", None),
    "llmisvc-v1alpha1": (f"{LLMISVC}1", None),
    "llmisvc-v1alpha2": (f"{LLMISVC}2", None),
    "llmisvc-v1alpha2-as-v1alpha1": (f"{LLMISVC}2", f"{LLMISVC}1"),
    "deployment-v1": ("apps/v1", None),
    "statefulset-v1": ("apps/v1", None),
    "lws-v1": ("leaderworkerset.x-k8s.io/v1", None),
}
# Forms of one pod template (no roles): InferenceService and the plain apps/v1 workloads.
ONE_TEMPLATE = ("isvc", "deployment", "statefulset")
_STORE = {
    "acknowledgeTailLatency": True,
    "bucket": "kv-cache",
    "endpoint": "https://s3.example.com",
}
DISKS: dict[str, dict[str, Any]] = {
    "cpu": {"type": "None"},
    "nvme-pv": {"type": "NVMe", "nvme": {"pool": "local-nvme"}},  # kvtier makes local PVs
    "nvme-class": {"type": "NVMe", "nvme": {"pool": "lvms-nvme"}},  # a StorageClass pool
    "cephfs": {"type": "CephFS"},
    "s3-secret": {
        "type": "ObjectStore",
        "objectStore": {**_STORE, "credentialsSecretRef": {"name": "s3-keys"}},
    },
    "s3": {"type": "ObjectStore", "objectStore": _STORE},
}
# Role shapes; `replicas3` only where the replica count changes the writes (CephFS's seed).
SHAPES = ("single", "replicas3", "pd", "worker-dp", "worker-pp")
ONLY_LLMISVC = {"pd", "worker-dp", "worker-pp"}
MULTI_NODE = {"worker-dp", "worker-pp"}  # a LeaderWorkerSet's groups have them too
ONLY_CEPHFS = {"replicas3"}


@dataclass(frozen=True)
class Case:
    name: str
    tier: Mapping[str, Any]
    target: Mapping[str, Any] | None
    policy: Mapping[str, Any] | None  # None: no KVCachePolicy exists
    rivals: tuple[tuple[int, str, str], ...] = ()  # other Apply-mode tiers on the target
    # KServe's CRDs the API server serves the target's schema from; None: none could be read.
    crds: str | None = "full"
    config_map: Mapping[str, Any] | None = None  # the ConfigMap spec.model.configMapRef names


def facts(case: Case) -> Facts:
    """The one place a case becomes the Facts `decide` reads."""
    target = None if case.target is None else copy.deepcopy(dict(case.target))
    return Facts(
        tier=copy.deepcopy(dict(case.tier)),
        policy=None if case.policy is None else copy.deepcopy(dict(case.policy)),
        target=target,
        config_map=None if case.config_map is None else copy.deepcopy(dict(case.config_map)),
        nodes=copy.deepcopy(NODES),
        now=NOW,
        storage_classes=copy.deepcopy(STORAGE_CLASSES),
        capacities=copy.deepcopy(CAPACITIES),
        rivals=case.rivals,
        target_schemas={} if case.crds is None else schemas_for(target, case.crds),
    )


def policy(object_store_allowed: bool = True) -> dict[str, Any]:
    """The example KVCachePolicy (Apply mode; both NVMe pools; CephFS with replica-1)."""
    body = _yaml("kvcachepolicy.yaml")
    body["spec"]["objectStore"]["allowed"] = object_store_allowed
    return body


def target(form: str, shape: str) -> dict[str, Any]:
    """The model server of one target form in one role shape."""
    api_version, written_as = TARGETS[form]
    if form.startswith("isvc"):
        obj = _isvc()  # Llama 3.1 70B, TP 4, one replica (examples/targets)
        if shape == "replicas3":
            obj["spec"]["predictor"].update(minReplicas=3, maxReplicas=3)
        return obj
    if form.startswith(("deployment", "statefulset")):
        kind = "Deployment" if form.startswith("deployment") else "StatefulSet"
        obj = workload(command=SERVE, args=["--max-model-len", "131072"], kind=kind)
        obj["spec"]["template"]["spec"]["nodeSelector"] = dict(H100)  # the example pools'
        obj["spec"]["replicas"] = 3 if shape == "replicas3" else 1
        return obj
    if form.startswith("lws"):
        obj = lws("single" if shape == "replicas3" else shape)  # Qwen3-32B, vLLM 0.33's image
        for template in obj["spec"]["leaderWorkerTemplate"].values():
            if isinstance(template, dict):
                template["spec"]["nodeSelector"] = dict(H100)  # the example pools'
                for container in template["spec"]["containers"]:
                    _fit_context(container.get("args") or [])
        obj["spec"]["replicas"] = 3 if shape == "replicas3" else 1
        return obj
    obj = {"worker-dp": multi_node_dp, "worker-pp": multi_node_pp}.get(shape, prefill_decode)()
    obj["apiVersion"] = api_version  # Qwen3-32B in every shape
    if shape in ("single", "replicas3"):
        del obj["spec"]["prefill"]
        obj["spec"]["replicas"] = 3 if shape == "replicas3" else 1
    if written_as is not None:
        # Another manager applies the user's spec in the older version (managedFields).
        _managed(obj, "argocd-controller", written_as, {"f:spec": _fields(obj["spec"])})
    return obj


def _fields(value: Mapping[str, Any]) -> dict[str, Any]:
    """The fieldsV1 of the maps in `value` (lists as leaves), as a manager that set it owns."""
    return {f"f:{k}": _fields(v) if isinstance(v, Mapping) else {} for k, v in value.items()}


def tier_for(obj: Mapping[str, Any], disk: Mapping[str, Any], **spec: Any) -> dict[str, Any]:
    """An Apply-mode KVCacheTier on `obj` (test_decide's tier with this target and disk)."""
    meta = obj["metadata"]
    body = tier(
        mode="Apply",
        targetRef={"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"]},
        disk=copy.deepcopy(dict(disk)),
        **spec,
    )
    body["metadata"].update(
        name=f"{meta['name']}-kv", uid=TIER_UID, creationTimestamp="2026-11-30T10:00:00Z"
    )
    return body


def _release_spec(series: str) -> dict[str, Any]:
    """The default series as the policy leaves it (no version named), any other by name."""
    return {} if series == DEFAULT_VLLM_VERSION else {"model": {"vllmVersion": series}}


def _refused(disk: str, series: str) -> bool:
    """The combinations the code refuses: an obj tier without keys where the release needs
    them in its config (ObjectStoreCredentialsRequired)."""
    return disk == "s3" and RELEASES[series].object_store_keys_in_config


def matrix() -> Iterator[Case]:
    for form in TARGETS:
        for disk in DISKS:
            for series in RELEASES:
                for shape in SHAPES:
                    if shape in ONLY_LLMISVC and form.startswith(ONE_TEMPLATE):
                        continue
                    if shape in ONLY_LLMISVC - MULTI_NODE and form.startswith("lws"):
                        continue
                    if shape in ONLY_CEPHFS and disk != "cephfs":
                        continue
                    if _refused(disk, series) and (form, shape) != ("isvc-v1beta1", "single"):
                        continue  # one golden of the refusal is enough
                    obj = target(form, shape)
                    yield Case(
                        f"{form}__{disk}__vllm-{series}__{shape}",
                        tier_for(obj, DISKS[disk], **_release_spec(series)),
                        obj,
                        policy(),
                    )


def refusals() -> Iterator[Case]:
    """One case per refusal kind the matrix cannot reach."""
    isvc = _isvc()
    cpu = DISKS["cpu"]
    yield Case("refused__target-not-found", tier_for(isvc, cpu), None, policy())
    claimed = [(0, "2026-11-30T09:00:00Z", "older-tier")]
    yield Case("refused__target-claimed", tier_for(isvc, cpu), isvc, policy(), tuple(claimed))
    # Refused with a disk tier: Ready names the refusal, not the local PVs it never creates.
    nvme = tier_for(isvc, DISKS["nvme-pv"])
    yield Case("refused__target-claimed-nvme", nvme, isvc, policy(), tuple(claimed))
    above = tier_for(isvc, DISKS["nvme-pv"], cpu={"size": "1Ti"})
    yield Case("refused__cpu-tier-above-limit", above, isvc, policy())
    unknown = target("llmisvc-v1alpha2", "single")
    unknown["apiVersion"] = f"{LLMISVC}9"  # a version KServe's CRDs do not serve
    yield Case("refused__unsupported-target", tier_for(unknown, cpu), unknown, policy(), crds=None)
    yield Case("refused__schema-unknown", tier_for(isvc, cpu), isvc, policy(), crds=None)
    yield Case("refused__atomic-spec", tier_for(isvc, cpu), isvc, policy(), crds="minimal")
    foreign = _isvc()
    foreign["spec"]["predictor"]["model"]["args"] += ["--kv-transfer-config", "{}"]
    yield Case("refused__kv-transfer-config-in-use", tier_for(foreign, cpu), foreign, policy())
    native = target("llmisvc-v1alpha2", "single")
    native["spec"]["kvCacheOffloading"] = {"cpu": "100Gi"}
    yield Case("refused__native-offload-in-use", tier_for(native, cpu), native, policy())
    old = target("llmisvc-v1alpha2", "single")  # the image names a release kvtier lacks
    old["spec"]["template"]["containers"][0]["image"] = "vllm/vllm-openai:v0.30.0"
    yield Case("refused__unsupported-vllm-version", tier_for(old, cpu), old, policy())
    nemotron = _yaml("targets/nemotron-llmisvc.yaml")  # a NAS config only vLLM 0.24 builds
    ref = {"name": "nas-linear", "key": "config.json"}
    newer = tier_for(nemotron, cpu, model={"vllmVersion": "0.33", "configMapRef": ref})
    yield Case(
        "refused__release-cannot-build-model", newer, nemotron, policy(), config_map=_nas_linear()
    )
    pool = tier_for(isvc, {"type": "NVMe", "nvme": {"pool": "nope"}})
    yield Case("refused__unknown-nvme-pool", pool, isvc, policy())
    yield Case("refused__no-policy-nvme", tier_for(isvc, DISKS["nvme-pv"]), isvc, None)
    s3 = tier_for(isvc, DISKS["s3-secret"])
    yield Case("refused__object-store-not-allowed", s3, isvc, policy(object_store_allowed=False))


def _nas_linear() -> dict[str, Any]:
    """A ConfigMap with Nemotron-Ultra's config.json, 15 no-op attention blocks made
    replace_with_linear (a NAS layout vLLM 0.33's nemotron_nas.py cannot build)."""
    config = json.loads((CONFIGS / "nemotron-ultra-253b.json").read_text(encoding="utf-8"))
    no_op = [b["attention"] for b in config["block_configs"] if b["attention"]["no_op"]]
    for attention in no_op[:15]:
        attention.update(no_op=False, replace_with_linear=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "nas-linear", "namespace": "llm"},
        "data": {"config.json": json.dumps(config)},
    }


def cases() -> list[Case]:
    return [*matrix(), *refusals()]
