"""Hostile inputs for the bad-input corpus (tests/e2e/test_bad_input_corpus.py), beyond the
admission entries of bad_inputs.yaml: more objects the API server must reject, model
config.json texts (built here, the 10 MB and deeply nested ones included, so no huge file
is committed) and tier specs that pass admission but must end in a condition."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WORKLOAD = {"averageContextTokens": 50000, "concurrentSessions": 64}
TARGET_REF = {"kind": "LLMInferenceService", "name": "llm"}
LONG_NAME = "n" * 253  # metadata.name limit of a custom resource (a DNS subdomain)

# --- admission: rejected by the CRD schema, CEL or the API server itself -------------------


def _tier(**spec: Any) -> dict[str, Any]:
    return {"targetRef": TARGET_REF, "workload": WORKLOAD, **spec}


def _pool(**over: Any) -> dict[str, Any]:
    pool = {
        "name": "local-nvme",
        "mountPath": "/var/mnt/nvme",
        "nodeSelector": {"kvcache.io/local-nvme": "true"},
        "capacityPerNode": "3Ti",
    }
    return {"nvmePools": [{**pool, **over}]}


# Same shape as bad_inputs.yaml entries: name, kind, object (the spec), optional metadata,
# expectMessage (a substring of the API server's error that names the field).
ADMISSION_EXTRAS: list[dict[str, Any]] = [
    {
        "name": "tier-name-254-chars",
        "kind": "KVCacheTier",
        "metadata": {"name": "n" * 254},
        "object": _tier(),
        "expectMessage": "metadata.name: Invalid value",
    },
    {
        "name": "tier-name-unicode",
        "kind": "KVCacheTier",
        "metadata": {"name": "tïer-模型"},
        "object": _tier(),
        "expectMessage": "metadata.name: Invalid value",
    },
    {
        "name": "tier-model-name-unicode",
        "kind": "KVCacheTier",
        "object": _tier(model={"name": "nvidia/Llama-3_1-Ñemotron-😀"}),
        "expectMessage": "spec.model.name: Invalid value",
    },
    {
        "name": "tier-model-name-254-chars",
        "kind": "KVCacheTier",
        "object": _tier(model={"name": "m" * 254}),
        "expectMessage": "spec.model.name: Too long",
    },
    {
        "name": "tier-context-tokens-huge",
        "kind": "KVCacheTier",
        "object": {
            "targetRef": TARGET_REF,
            "workload": {**WORKLOAD, "averageContextTokens": 10**12},
        },
        "expectMessage": "spec.workload.averageContextTokens: Invalid value",
    },
    {
        "name": "tier-sessions-beyond-int64",
        "kind": "KVCacheTier",
        "object": {"targetRef": TARGET_REF, "workload": {**WORKLOAD, "concurrentSessions": 10**20}},
        "expectMessage": "spec.workload.concurrentSessions",
    },
    {
        "name": "tier-sessions-string",
        "kind": "KVCacheTier",
        "object": {"targetRef": TARGET_REF, "workload": {**WORKLOAD, "concurrentSessions": "64"}},
        "expectMessage": "spec.workload.concurrentSessions: Invalid value",
    },
    {
        "name": "tier-kv-heads-float",
        "kind": "KVCacheTier",
        "object": _tier(
            model={"geometry": {"attentionLayers": 64, "kvHeads": 8.5, "headDim": 128}}
        ),
        "expectMessage": "spec.model.geometry.kvHeads: Invalid value",
    },
    {
        "name": "tier-tensor-parallel-huge",
        "kind": "KVCacheTier",
        "object": _tier(model={"tensorParallelSize": 2**31}),
        "expectMessage": "spec.model.tensorParallelSize: Invalid value",
    },
    {
        "name": "tier-workload-a-list",
        "kind": "KVCacheTier",
        "object": {"targetRef": TARGET_REF, "workload": [WORKLOAD]},
        "expectMessage": "spec.workload: Invalid value",
    },
    {
        "name": "tier-mode-lowercase",
        "kind": "KVCacheTier",
        "object": _tier(mode="apply"),
        "expectMessage": "spec.mode: Unsupported value",
    },
    {
        "name": "tier-target-kind-lowercase",
        "kind": "KVCacheTier",
        "object": {
            "targetRef": {"kind": "llminferenceservice", "name": "llm"},
            "workload": WORKLOAD,
        },
        "expectMessage": "spec.targetRef.kind: Unsupported value",
    },
    {
        "name": "tier-target-api-version-core",
        "kind": "KVCacheTier",
        "object": {"targetRef": {**TARGET_REF, "apiVersion": "v1"}, "workload": WORKLOAD},
        "expectMessage": "spec.targetRef.apiVersion: Invalid value",
    },
    {
        "name": "tier-target-name-253-plus-slash",
        "kind": "KVCacheTier",
        "object": {"targetRef": {**TARGET_REF, "name": "a/" + "b" * 251}, "workload": WORKLOAD},
        "expectMessage": "spec.targetRef.name: Invalid value",
    },
    {
        "name": "tier-pool-unicode",
        "kind": "KVCacheTier",
        "object": _tier(disk={"type": "NVMe", "nvme": {"pool": "pööl"}}),
        "expectMessage": "spec.disk.nvme.pool: Invalid value",
    },
    {
        "name": "tier-pool-dotdot",
        "kind": "KVCacheTier",
        "object": _tier(disk={"type": "NVMe", "nvme": {"pool": ".."}}),
        "expectMessage": "spec.disk.nvme.pool: Invalid value",
    },
    {
        "name": "tier-pool-absolute-path",
        "kind": "KVCacheTier",
        "object": _tier(disk={"type": "NVMe", "nvme": {"pool": "/etc"}}),
        "expectMessage": "spec.disk.nvme.pool: Invalid value",
    },
    {
        "name": "tier-pool-64-chars",
        "kind": "KVCacheTier",
        "object": _tier(disk={"type": "NVMe", "nvme": {"pool": "p" * 64}}),
        "expectMessage": "spec.disk.nvme.pool: Too long",
    },
    {
        "name": "tier-configmap-key-traversal",
        "kind": "KVCacheTier",
        "object": _tier(model={"configMapRef": {"name": "cfg", "key": "../config.json"}}),
        "expectMessage": "spec.model.configMapRef.key: Invalid value",
    },
    {
        "name": "tier-configmap-name-traversal",
        "kind": "KVCacheTier",
        "object": _tier(model={"configMapRef": {"name": "../kube-system/cfg", "key": "c.json"}}),
        "expectMessage": "spec.model.configMapRef.name: Invalid value",
    },
    {
        "name": "tier-baseline-ttft-negative",
        "kind": "KVCacheTier",
        "object": _tier(probe={"baselineTTFTSeconds": -1}),
        "expectMessage": "spec.probe.baselineTTFTSeconds: Invalid value",
    },
    {
        "name": "tier-probe-runtime-huge",
        "kind": "KVCacheTier",
        "object": _tier(probe={"runtimeSeconds": 10**6}),
        "expectMessage": "spec.probe.runtimeSeconds: Invalid value",
    },
    {
        "name": "tier-object-store-endpoint-file-url",
        "kind": "KVCacheTier",
        "object": _tier(
            disk={
                "type": "ObjectStore",
                "objectStore": {"acknowledgeTailLatency": True, "endpoint": "file:///etc/passwd"},
            }
        ),
        "expectMessage": "spec.disk.objectStore.endpoint: Invalid value",
    },
    {
        "name": "policy-pool-name-unicode",
        "kind": "KVCachePolicy",
        "object": _pool(name="nvmé"),
        "expectMessage": "spec.nvmePools[0].name: Invalid value",
    },
    {
        "name": "policy-pool-capacity-garbage",
        "kind": "KVCachePolicy",
        "object": _pool(capacityPerNode="lots"),
        "expectMessage": "spec.nvmePools[0].capacityPerNode",
    },
    {
        "name": "policy-pool-mount-path-traversal",
        "kind": "KVCachePolicy",
        "object": _pool(mountPath="/var/mnt/../../etc"),
        "expectMessage": "spec.nvmePools[0].mountPath",
    },
]

# --- hostile config.json texts --------------------------------------------------------------


def llama(**over: Any) -> dict[str, Any]:
    """A real Llama-3.1-70B config.json (the keys sizing reads), with overrides."""
    base: dict[str, Any] = {
        "_name_or_path": "meta-llama/Llama-3.1-70B-Instruct",
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 8192,
        "torch_dtype": "bfloat16",
    }
    return {**base, **over}


def deepseek(**over: Any) -> dict[str, Any]:
    """A DeepSeek-V3-shaped (MLA) config.json with overrides."""
    base: dict[str, Any] = {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "torch_dtype": "bfloat16",
    }
    return {**base, **over}


def without(config: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in keys}


def dumps(config: Any) -> str:
    return json.dumps(config, ensure_ascii=False)


def nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def nested_arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def ten_megabytes() -> str:
    """A valid config.json padded to 10 MB: beyond any ConfigMap (1 MiB)."""
    return dumps(llama(padding="x" * (10 * 1024 * 1024)))


def near_limit() -> str:
    """A valid config.json of ~0.9 MiB: admitted, and must still be read correctly."""
    return dumps(llama(padding="x" * (900 * 1024)))


@dataclass(frozen=True)
class Expect:
    """The condition a case must end in; reason None accepts any reason."""

    ctype: str
    status: str
    reason: str | None
    words: str = ""  # a substring of the message (the field it names)


SIZED_INVALID = Expect("Sized", "False", "InvalidModelConfig", "spec.model.configMapRef")


@dataclass(frozen=True)
class ConfigCase:
    """A ConfigMap holding a hostile config.json, read by an Apply-mode tier."""

    name: str
    text: Callable[[], str]
    expect: Expect = SIZED_INVALID
    key: str = "config.json"  # the key written into the ConfigMap
    configmap_rejected: bool = False  # the API server refuses the ConfigMap itself


def _text(value: Any) -> Callable[[], str]:
    return lambda: value if isinstance(value, str) else dumps(value)


SIZED_TRUE = Expect("Sized", "True", "Sized")
MLA = deepseek

CONFIG_CASES: list[ConfigCase] = [
    ConfigCase("cfg-layers-string", _text(llama(num_hidden_layers="80"))),
    ConfigCase("cfg-layers-float", _text(llama(num_hidden_layers=80.0))),
    ConfigCase("cfg-layers-bool", _text(llama(num_hidden_layers=True))),
    ConfigCase("cfg-layers-null-only", _text(llama(num_hidden_layers=None))),
    ConfigCase("cfg-heads-zero", _text(llama(num_attention_heads=0))),
    ConfigCase("cfg-kv-heads-negative", _text(llama(num_key_value_heads=-8))),
    ConfigCase("cfg-kv-heads-zero", _text(llama(num_key_value_heads=0))),
    ConfigCase("cfg-kv-heads-per-layer", _text(llama(num_key_value_heads=[8] * 80))),
    ConfigCase("cfg-head-dim-string", _text(llama(head_dim="128"))),
    ConfigCase("cfg-head-dim-object", _text(llama(head_dim={"value": 128}))),
    ConfigCase("cfg-hidden-not-multiple", _text(llama(hidden_size=8193))),
    ConfigCase(
        "cfg-layers-huge",
        _text(llama(num_hidden_layers=10**30)),
        Expect("Sized", "False", None, "spec.model"),
    ),
    ConfigCase(
        "cfg-head-dim-int64-max",
        _text(llama(head_dim=2**63 - 1)),
        Expect("Sized", "False", None, "spec.model"),
    ),
    ConfigCase("cfg-missing-layers", _text(without(llama(), "num_hidden_layers"))),
    ConfigCase("cfg-missing-heads", _text(without(llama(), "num_attention_heads"))),
    ConfigCase("cfg-empty-object", _text({})),
    ConfigCase("cfg-top-level-array", _text([llama()])),
    ConfigCase("cfg-top-level-string", _text('"config"')),
    ConfigCase("cfg-top-level-null", _text("null")),
    ConfigCase("cfg-not-json", _text("{not json")),
    ConfigCase("cfg-truncated", _text(dumps(llama())[:-7])),
    ConfigCase("cfg-empty-text", _text("")),
    ConfigCase(
        "cfg-nan",
        _text(dumps(llama()).replace('"num_hidden_layers": 80', '"num_hidden_layers": NaN')),
    ),
    ConfigCase(
        "cfg-infinity-literal",
        _text(dumps(llama()).replace('"num_hidden_layers": 80', '"num_hidden_layers": 1e400')),
    ),
    ConfigCase("cfg-deeply-nested-objects", lambda: nested_objects(100_000)),
    ConfigCase("cfg-deeply-nested-arrays", lambda: nested_arrays(300_000)),
    ConfigCase(
        "cfg-deeply-nested-text-config",
        lambda: dumps(llama())[:-1] + ', "text_config": ' + nested_objects(50_000) + "}",
    ),
    ConfigCase(
        "cfg-ten-megabytes",
        ten_megabytes,
        Expect("Sized", "False", "ConfigMapNotFound", "spec.model.configMapRef"),
        configmap_rejected=True,
    ),
    ConfigCase("cfg-near-limit-padding", near_limit, SIZED_TRUE),
    ConfigCase(
        "cfg-unicode-keys-and-name",
        _text(
            llama(
                _name_or_path="ünïcödé/模型-🦙", **{"模型": "x", "ключ": [1, 2], "🔑": {"ß": None}}
            )
        ),
        SIZED_TRUE,
    ),
    ConfigCase(
        "cfg-unicode-lookalike-key",
        _text({**without(llama(), "num_hidden_layers"), "num_hidden_layérs": 80}),
    ),
    ConfigCase("cfg-mla-lora-zero", _text(MLA(kv_lora_rank=0))),
    ConfigCase("cfg-mla-lora-negative", _text(MLA(kv_lora_rank=-512))),
    ConfigCase("cfg-mla-lora-string", _text(MLA(kv_lora_rank="512"))),
    ConfigCase("cfg-mla-lora-float", _text(MLA(kv_lora_rank=512.5))),
    ConfigCase("cfg-mla-rope-missing", _text(without(MLA(), "qk_rope_head_dim"))),
    ConfigCase(
        "cfg-mla-lora-huge",
        _text(MLA(kv_lora_rank=2**62)),
        Expect("Sized", "False", None, "spec.model"),
    ),
    ConfigCase("cfg-layer-types-wrong-length", _text(llama(layer_types=["full_attention"] * 3))),
    ConfigCase("cfg-layer-types-mamba", _text(llama(layer_types=["mamba"] * 80))),
    ConfigCase("cfg-layer-types-a-string", _text(llama(layer_types="full_attention"))),
    ConfigCase("cfg-hybrid-mamba", _text(llama(hybrid_override_pattern="M-M-M-"))),
    ConfigCase("cfg-encoder-decoder", _text(llama(is_encoder_decoder=True))),
    ConfigCase("cfg-block-configs-garbage", _text(llama(block_configs=[1, 2, 3]))),
    ConfigCase(
        "cfg-block-configs-zero-group",
        _text(llama(block_configs=[{"attention": {"n_heads_in_group": 0}}])),
    ),
    ConfigCase(
        "cfg-block-configs-all-no-op", _text(llama(block_configs=[{"attention": {"no_op": True}}]))
    ),
    ConfigCase(
        "cfg-dtype-unknown",
        _text(llama(torch_dtype="int3")),
        Expect("Sized", "False", None, "spec.model"),
    ),
    ConfigCase(
        "cfg-key-missing",
        _text(llama()),
        Expect("Sized", "False", "ConfigMapKeyMissing", "spec.model.configMapRef"),
        key="other.json",
    ),
]

# --- tier specs that pass admission but must end in a condition ----------------------------


@dataclass(frozen=True)
class TierCase:
    name: str
    spec: dict[str, Any]  # merged over an Apply-mode spec targeting the case's own server
    expect: Expect
    target: dict[str, Any] = field(default_factory=dict)  # overrides of the target
    create_target: bool = True
    fails: bool = True  # a failing tier must leave its target untouched


NEMOTRON = "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1"
LLAMA = "meta-llama/Llama-3.1-70B-Instruct"

TIER_CASES: list[TierCase] = [
    TierCase(
        "tp-3-does-not-fit-8-kv-heads",
        {"model": {"name": LLAMA, "tensorParallelSize": 3}},
        Expect("Sized", "False", "SizingFailed", "tensorParallelSize"),
    ),
    TierCase(
        "geometry-5-kv-heads-tp-8",
        {
            "model": {
                "name": LLAMA,
                "geometry": {"attentionLayers": 80, "kvHeads": 5, "headDim": 128},
            }
        },
        Expect("Sized", "False", "SizingFailed", "tensorParallelSize"),
    ),
    # An explicit geometry overrides the catalog: the target's model need not be in it.
    TierCase(
        "geometry-with-uncatalogued-target",
        {"model": {"geometry": {"attentionLayers": 80, "kvHeads": 8, "headDim": 128}}},
        Expect("Sized", "True", "Sized"),
        target={"uri": "hf://acme/custom-70b"},
        fails=False,
    ),
    TierCase(
        "unknown-model",
        {"model": {"name": "acme/unknown-model-9b"}},
        Expect("Sized", "False", "ModelUnknown", "spec.model"),
    ),
    TierCase(
        "unknown-model-from-target",
        {},
        Expect("Sized", "False", "ModelUnknown", "spec.model"),
        target={"uri": "hf://acme/nothing-here"},
    ),
    TierCase(
        "unicode-model-in-target",
        {},
        Expect("Sized", "False", "ModelUnknown", "spec.model"),
        target={"uri": "hf://ünïcödé/模型-🦙"},
    ),
    TierCase(
        "model-name-253-unknown",
        {"model": {"name": "a" * 253}},
        Expect("Sized", "False", "ModelUnknown", "spec.model"),
    ),
    TierCase(
        "unknown-pool",
        {"model": {"name": NEMOTRON}, "disk": {"type": "NVMe", "nvme": {"pool": "no-such-pool"}}},
        Expect("PolicyCompliant", "False", "UnknownNVMePool", "spec.disk.nvme.pool"),
    ),
    TierCase(
        "target-missing",
        {"model": {"name": NEMOTRON}},
        Expect("TargetFound", "False", "TargetNotFound", "spec.targetRef"),
        create_target=False,
    ),
    TierCase(
        "configmap-missing",
        {"model": {"configMapRef": {"name": "does-not-exist", "key": "config.json"}}},
        Expect("Sized", "False", "ConfigMapNotFound", "spec.model.configMapRef"),
    ),
    TierCase(
        "nvme-size-exceeds-pool",
        {
            "model": {"name": NEMOTRON},
            "disk": {"type": "NVMe", "nvme": {"pool": "local-nvme", "size": "100Ti"}},
        },
        Expect("Provisioned", "False", "NVMeSizeExceedsPool", "spec.disk.nvme.size"),
    ),
    TierCase(
        "object-store-not-allowed",
        {
            "model": {"name": NEMOTRON},
            "disk": {
                "type": "ObjectStore",
                "objectStore": {
                    "acknowledgeTailLatency": True,
                    "bucket": "kv-cache",
                    "endpoint": "https://s3.example.com",
                },
            },
        },
        Expect("PolicyCompliant", "False", "ObjectStoreNotAllowed", "spec.disk.type"),
    ),
    TierCase(
        "workload-at-admission-maximum",
        {
            "model": {"name": LLAMA},
            "workload": {"averageContextTokens": 1_000_000_000, "concurrentSessions": 10_000_000},
        },
        Expect("Sized", "False", None, "spec.workload"),
    ),
    TierCase(
        "cpu-size-exabytes",
        {"model": {"name": NEMOTRON}, "cpu": {"size": "8Ei"}},
        Expect("Sized", "False", None, "spec.cpu.size"),
    ),
    TierCase(
        "user-kv-transfer-config",
        {"model": {"name": NEMOTRON}},
        Expect("Conflict", "True", "KVTransferConfigInUse", "--kv-transfer-config"),
        target={"env": [{"name": "VLLM_ADDITIONAL_ARGS", "value": "--kv-transfer-config '{}'"}]},
    ),
    # Valid at the limits: accepted, sized and applied like any other tier.
    TierCase(
        LONG_NAME,
        {"model": {"name": NEMOTRON}, "disk": {"type": "NVMe", "nvme": {"pool": "local-nvme"}}},
        Expect("Ready", "True", "Applied"),
        fails=False,
    ),
    TierCase(
        "target-name-253",
        {"model": {"name": NEMOTRON}},
        Expect("Ready", "True", "Applied"),
        target={"name": "t" * 253},
        fails=False,
    ),
]
