"""KVCacheTier: a user's request for KV-cache offload tiers for one model server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from kvtier.api.common import (
    CONFIGMAP_KEY,
    AutoOrQuantity,
    Condition,
    DnsLabel,
    DnsSubdomain,
    KubeModel,
    LongText,
    PositiveQuantity,
    ShortText,
    VLLMVersion,
    cel,
    list_map,
    quantity_rules,
    validations,
    vllm_version_rules,
)
from kvtier.api.observed import ObservedStatus


class Mode(StrEnum):
    """Apply writes the tiers and patches the target; Plan computes and reports only."""

    APPLY = "Apply"
    PLAN = "Plan"


class KVCacheDtype(StrEnum):
    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FP8 = "fp8"


class DiskType(StrEnum):
    AUTO = "Auto"
    NONE = "None"
    NVME = "NVMe"
    CEPHFS = "CephFS"
    OBJECT_STORE = "ObjectStore"


class Topology(StrEnum):
    CPU_ONLY = "CPUOnly"
    CPU_AND_NVME = "CPUAndNVMe"
    CPU_AND_CEPHFS = "CPUAndCephFS"
    CPU_AND_OBJECT_STORE = "CPUAndObjectStore"


class ConditionType(StrEnum):
    """Condition types the operator sets on a KVCacheTier."""

    READY = "Ready"
    SIZED = "Sized"
    TARGET_FOUND = "TargetFound"
    POLICY_COMPLIANT = "PolicyCompliant"
    PROVISIONED = "Provisioned"
    APPLIED = "Applied"
    PROBED = "Probed"
    TIER_BENEFICIAL = "TierBeneficial"
    TIER_EFFECTIVE = "TierEffective"
    DISK_PRESSURE = "DiskPressure"
    CONFLICT = "Conflict"
    SCHEDULER_SYNCED = "SchedulerSynced"


class ValueSource(StrEnum):
    """Where an effective value came from: built-in default < KVCachePolicy < target < KVCacheTier
    (the target, for what it tells of itself: its vLLM image's version)."""

    DEFAULT = "Default"
    POLICY = "Policy"
    TARGET = "Target"
    TIER = "Tier"


# --- spec -------------------------------------------------------------------------------------


# The kinds and versions a target may have are the target registry's (kvtier.targets), which
# sits above these models: the CRD generator stamps them into TargetRef's schema
# (target_ref_schema), and the operator refuses a kind the registry does not know.
TargetKinds = Mapping[str, Sequence[str]]  # a target kind → its apiVersions, preferred first
# group/version, the group a DNS subdomain
TARGET_API_VERSION = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/v[0-9]+((alpha|beta)[0-9]+)?$"
)


class TargetRef(KubeModel):
    """The model server to give offload tiers; it must live in the KVCacheTier's namespace."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.__namespace__)",
                "spec.targetRef.namespace is not allowed: the target must be in the "
                "KVCacheTier's own namespace",
                field_path=".namespace",
                reason="FieldValueForbidden",
            )
        )
    )

    api_version: (
        Annotated[str, StringConstraints(max_length=253, pattern=TARGET_API_VERSION)] | None
    ) = Field(
        default=None,
        description="API version of the target (group/version); the preferred version the "
        "cluster serves when omitted.",
    )
    kind: Annotated[
        str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Z][A-Za-z0-9]*$")
    ] = Field(description="Kind of the target: a model server kind kvtier supports.")
    name: DnsSubdomain = Field(description="Name of the target in the same namespace.")
    # Declared only so admission can reject it with a clear message instead of pruning it.
    namespace: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None,
        description="Not allowed: a KVCacheTier only targets objects in its own namespace.",
    )

    @model_validator(mode="after")
    def _same_namespace_only(self) -> TargetRef:
        if self.namespace is not None:
            raise ValueError(
                "spec.targetRef.namespace is not allowed: the target must be in the "
                "KVCacheTier's own namespace"
            )
        return self


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_map(entries: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{_cel_string(k)}: {v}" for k, v in entries.items()) + "}"


def target_ref_schema(schema: Mapping[str, Any], kinds: TargetKinds) -> dict[str, Any]:
    """TargetRef's structural schema with the target kinds stamped in: `kind` is one of them
    (the API server's "Unsupported value" error lists them), and a given `apiVersion` must be
    one its kind is registered in (a CEL rule whose message names them)."""
    properties = dict(schema["properties"])
    names = "; ".join(f"{kind}: {', '.join(versions)}" for kind, versions in kinds.items())
    # The enum says all the pattern did; the length bound stays for CEL's cost estimate.
    shape = {k: v for k, v in properties["kind"].items() if k not in ("pattern", "minLength")}
    properties["kind"] = {
        **shape,
        "enum": list(kinds),
        "description": f"Kind of the target, one of the model server kinds kvtier supports: "
        f"{', '.join(kinds)}.",
    }
    properties["apiVersion"] = {
        **properties["apiVersion"],
        "description": f"API version of the target, one kvtier supports for its kind ({names}); "
        "when omitted, the first of them the cluster serves.",
    }
    versions = _cel_map({k: "[" + ", ".join(map(_cel_string, v)) + "]" for k, v in kinds.items()})
    listed = _cel_map({k: _cel_string(", ".join(v)) for k, v in kinds.items()})
    rule = {
        **cel(
            f"!has(self.apiVersion) || !(self.kind in {versions}) || "
            f"self.apiVersion in {versions}[self.kind]",
            f"spec.targetRef.apiVersion must be one kvtier supports for the kind ({names})",
            field_path=".apiVersion",
            reason="FieldValueInvalid",
        ),
        "messageExpression": "'spec.targetRef.apiVersion ' + self.apiVersion + ' is not a "
        f"version kvtier supports for ' + self.kind + ': ' + {listed}[self.kind]",
    }
    return {
        **schema,
        "properties": properties,
        "x-kubernetes-validations": [*schema.get("x-kubernetes-validations", []), rule],
    }


class ConfigMapKeyRef(KubeModel):
    """A ConfigMap key that holds the model's Hugging Face config.json."""

    name: DnsSubdomain = Field(description="Name of the ConfigMap in the same namespace.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=CONFIGMAP_KEY)] = (
        Field(description="Key in the ConfigMap whose value is the config.json text.")
    )


_GEOMETRY_MESSAGE = (
    "spec.model.geometry needs all three of attentionLayers, kvHeads and headDim, or none"
)


class ModelGeometry(KubeModel):
    """KV-cache geometry of the model; overrides the catalog and config.json."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.attentionLayers) == has(self.kvHeads) && "
                "has(self.kvHeads) == has(self.headDim)",
                _GEOMETRY_MESSAGE,
            )
        )
    )

    attention_layers: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Layers that hold KV (sliding-window layers count; layers without "
        "attention do not), e.g. 64 of 162 blocks for Nemotron-Ultra.",
    )
    kv_heads: int | None = Field(
        default=None, ge=1, le=4096, description="Key/value heads of the whole model."
    )
    head_dim: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Dimension of one head (read head_dim from config.json when present).",
    )

    @model_validator(mode="after")
    def _all_or_none(self) -> ModelGeometry:
        present = {v is None for v in (self.attention_layers, self.kv_heads, self.head_dim)}
        if len(present) > 1:
            raise ValueError(_GEOMETRY_MESSAGE)
        return self


class ModelSpec(KubeModel):
    """What the model is; every field is optional when the target tells enough."""

    name: (
        Annotated[
            str,
            StringConstraints(
                min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][-A-Za-z0-9._/]*$"
            ),
        ]
        | None
    ) = Field(
        default=None,
        description="Catalog key or Hugging Face id, e.g. nvidia/Llama-3_1-Nemotron-Ultra-253B-v1; "
        "read from the target when omitted.",
    )
    config_map_ref: ConfigMapKeyRef | None = Field(
        default=None,
        description="A ConfigMap holding the model's config.json, for models not in the catalog.",
    )
    geometry: ModelGeometry | None = Field(
        default=None, description="Explicit KV geometry; all three fields or none."
    )
    kv_cache_dtype: KVCacheDtype | None = Field(
        default=None,
        description="KV-cache element type: auto (the model's dtype), bfloat16, float16 or fp8. "
        "Defaults to the KVCachePolicy's default, else auto.",
    )
    tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Tensor-parallel ranks per replica; read from the target when omitted.",
    )
    block_size_tokens: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Offload block size in tokens; a multiple of the GPU block size. "
        "Defaults to the KVCachePolicy's default, else 16.",
    )
    vllm_version: VLLMVersion | None = Field(
        default=None,
        alias="vllmVersion",
        description="The vLLM release serving the model (0.24.x or 0.33.x): how it lays out "
        "and places the CPU tier. Defaults to the version of the target's vllm/vllm-openai "
        "image, else the KVCachePolicy's default, else 0.24 (the study's).",
        json_schema_extra=vllm_version_rules("spec.model.vllmVersion"),
    )


class WorkloadSpec(KubeModel):
    """The traffic the tiers are sized for."""

    average_context_tokens: int = Field(
        ge=1, le=1_000_000_000, description="Average context length (input tokens) per session."
    )
    concurrent_sessions: int = Field(
        ge=1, le=10_000_000, description="Sessions whose KV cache should stay reusable at once."
    )


class CPUSpec(KubeModel):
    """The CPU (host memory) tier every offload setup needs: disk tiers stage through it."""

    size: AutoOrQuantity | None = Field(
        default=None,
        description="Total host memory for the CPU tier over all ranks of one replica "
        "(vLLM cpu_bytes_to_use): 'auto' sizes it from the working set within the "
        "KVCachePolicy's limits, or a quantity such as 64Gi. Defaults to auto.",
        json_schema_extra=quantity_rules("spec.cpu.size", allow_auto=True),
    )


class NVMeDisk(KubeModel):
    """A local NVMe tier carved from a pool the KVCachePolicy defines."""

    pool: DnsLabel = Field(
        description="Name of an NVMe pool in the KVCachePolicy; users never give host paths."
    )
    size: PositiveQuantity | None = Field(
        default=None,
        description="Capacity per replica; defaults to what the working set needs beyond the "
        "CPU tier, within the pool's capacity per node.",
        json_schema_extra=quantity_rules("spec.disk.nvme.size"),
    )


class CephFSDisk(KubeModel):
    """A shared CephFS tier; storage class and replica-1 pool come from the KVCachePolicy."""

    size: PositiveQuantity | None = Field(
        default=None,
        description="Capacity of the shared volume, e.g. 10Ti; defaults to what the working "
        "set needs beyond the CPU tier.",
        json_schema_extra=quantity_rules("spec.disk.cephfs.size"),
    )


class SecretRef(KubeModel):
    """A Secret in the same namespace."""

    name: DnsSubdomain = Field(description="Name of the Secret.")


class ObjectStoreDisk(KubeModel):
    """An S3 tier. Its p99 latency lands directly in TTFT, hence the acknowledgement."""

    acknowledge_tail_latency: bool | None = Field(
        default=None,
        description="Must be true: object-store p99 per block can exceed a second and lands "
        "directly in time to first token.",
    )
    endpoint: (
        Annotated[str, StringConstraints(max_length=2048, pattern=r"^https?://[^\s]+$")] | None
    ) = Field(default=None, description="S3 endpoint URL, e.g. https://s3.example.com.")
    bucket: (
        Annotated[
            str,
            StringConstraints(
                min_length=3, max_length=63, pattern=r"^[a-z0-9][-a-z0-9.]*[a-z0-9]$"
            ),
        ]
        | None
    ) = Field(default=None, description="Bucket that holds the KV blocks.")
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, given to the "
        "model server's container by reference (env valueFrom); the operator never reads it.",
    )


_OBJECT_STORE_ACK_MESSAGE = (
    "spec.disk.objectStore.acknowledgeTailLatency must be true to use an ObjectStore tier: "
    "its p99 latency lands directly in time to first token"
)


_OBJECT_STORE_WHERE_MESSAGE = (
    "spec.disk.objectStore.bucket and spec.disk.objectStore.endpoint are required when "
    "spec.disk.type is ObjectStore: vLLM's obj tier refuses to start without them"
)


class DiskSpec(KubeModel):
    """The secondary (disk) tier behind the CPU tier."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.nvme) || (has(self.type) && self.type in ['NVMe', 'Auto'])",
                "spec.disk.nvme is only allowed when spec.disk.type is NVMe or Auto",
                field_path=".nvme",
                reason="FieldValueForbidden",
            ),
            cel(
                "!has(self.cephfs) || (has(self.type) && self.type in ['CephFS', 'Auto'])",
                "spec.disk.cephfs is only allowed when spec.disk.type is CephFS or Auto",
                field_path=".cephfs",
                reason="FieldValueForbidden",
            ),
            cel(
                "!has(self.objectStore) || (has(self.type) && self.type == 'ObjectStore')",
                "spec.disk.objectStore is only allowed when spec.disk.type is ObjectStore",
                field_path=".objectStore",
                reason="FieldValueForbidden",
            ),
            cel(
                "!has(self.type) || self.type != 'NVMe' || has(self.nvme)",
                "spec.disk.nvme.pool is required when spec.disk.type is NVMe",
                field_path=".nvme",
                reason="FieldValueRequired",
            ),
            cel(
                "!has(self.type) || self.type != 'ObjectStore' || (has(self.objectStore) && "
                "has(self.objectStore.acknowledgeTailLatency) && "
                "self.objectStore.acknowledgeTailLatency)",
                _OBJECT_STORE_ACK_MESSAGE,
                field_path=".objectStore",
                reason="FieldValueRequired",
            ),
            cel(
                "!has(self.type) || self.type != 'ObjectStore' || (has(self.objectStore) && "
                "has(self.objectStore.bucket) && has(self.objectStore.endpoint))",
                _OBJECT_STORE_WHERE_MESSAGE,
                field_path=".objectStore",
                reason="FieldValueRequired",
            ),
        )
    )

    type: DiskType | None = Field(
        default=None,
        description="Auto picks from the working set and replica count (fits the CPU tier: "
        "None; one replica: NVMe; several: CephFS; never ObjectStore). Defaults to the "
        "KVCachePolicy's default, else Auto.",
    )
    nvme: NVMeDisk | None = Field(default=None, description="Settings when type is NVMe or Auto.")
    cephfs: CephFSDisk | None = Field(
        default=None, description="Settings when type is CephFS or Auto."
    )
    object_store: ObjectStoreDisk | None = Field(
        default=None, description="Settings when type is ObjectStore."
    )

    @model_validator(mode="after")
    def _type_matches_sub_block(self) -> DiskSpec:
        if self.nvme is not None and self.type not in (DiskType.NVME, DiskType.AUTO):
            raise ValueError("spec.disk.nvme is only allowed when spec.disk.type is NVMe or Auto")
        if self.cephfs is not None and self.type not in (DiskType.CEPHFS, DiskType.AUTO):
            raise ValueError(
                "spec.disk.cephfs is only allowed when spec.disk.type is CephFS or Auto"
            )
        if self.object_store is not None and self.type != DiskType.OBJECT_STORE:
            raise ValueError(
                "spec.disk.objectStore is only allowed when spec.disk.type is ObjectStore"
            )
        if self.type == DiskType.NVME and self.nvme is None:
            raise ValueError("spec.disk.nvme.pool is required when spec.disk.type is NVMe")
        if self.type == DiskType.OBJECT_STORE and not (
            self.object_store is not None and self.object_store.acknowledge_tail_latency
        ):
            raise ValueError(_OBJECT_STORE_ACK_MESSAGE)
        if self.type == DiskType.OBJECT_STORE and not (
            self.object_store is not None
            and self.object_store.bucket
            and self.object_store.endpoint
        ):
            raise ValueError(_OBJECT_STORE_WHERE_MESSAGE)
        return self


class ProbeSpec(KubeModel):
    """The storage probe (fio at the model's block size) run before serving."""

    enabled: bool | None = Field(
        default=None,
        description="Probe each disk tier before use. Defaults to the KVCachePolicy's "
        "default, else true.",
    )
    baseline_ttft_seconds: float | None = Field(
        default=None,
        alias="baselineTTFTSeconds",
        gt=0,
        le=86400,
        description="Mean time to first token with offload off, at averageContextTokens; "
        "used for the restore-or-recompute crossover.",
    )
    runtime_seconds: int | None = Field(
        default=None,
        ge=1,
        le=3600,
        description="fio runtime. Defaults to the KVCachePolicy's default, else 60.",
    )


class KVCacheTierSpec(KubeModel):
    """Desired KV-cache offload tiers for one model server."""

    mode: Mode | None = Field(
        default=None,
        description="Apply writes storage and patches the target; Plan only computes and "
        "reports in status.plan. Defaults to the KVCachePolicy's default, else Apply.",
    )
    target_ref: TargetRef = Field(description="The model server in this namespace.")
    model: ModelSpec | None = Field(
        default=None, description="The model; optional when the target tells enough."
    )
    workload: WorkloadSpec = Field(description="The workload the tiers are sized for.")
    cpu: CPUSpec | None = Field(default=None, description="The CPU (host memory) tier.")
    disk: DiskSpec | None = Field(default=None, description="The disk tier behind the CPU tier.")
    probe: ProbeSpec | None = Field(default=None, description="The storage probe.")


# --- status -----------------------------------------------------------------------------------


class SizingStatus(KubeModel):
    """Sizing from the model geometry and the workload (same shape as `kvtier plan -o json`)."""

    bytes_per_token: int | None = Field(
        default=None, ge=0, description="KV bytes per token for the whole server (all ranks)."
    )
    bytes_per_token_per_rank: int | None = Field(
        default=None, ge=0, description="KV bytes per token on one tensor-parallel rank."
    )
    block_bytes: int | None = Field(
        default=None, ge=0, description="Bytes of one offload block, server-wide."
    )
    working_set_bytes: int | None = Field(
        default=None, ge=0, description="averageContextTokens x concurrentSessions x bytesPerToken."
    )
    cpu_bytes_to_use: int | None = Field(
        default=None, ge=0, description="vLLM cpu_bytes_to_use: the CPU tier over all ranks."
    )
    fits_in_cpu: bool | None = Field(
        default=None, alias="fitsInCPU", description="Whether the working set fits the CPU tier."
    )
    contexts_in_cpu: float | None = Field(
        default=None,
        alias="contextsInCPU",
        ge=0,
        description="How many average contexts the CPU tier holds.",
    )
    topology: Topology | None = Field(default=None, description="The chosen tier topology.")
    context_bytes: int | None = Field(
        default=None, ge=0, description="CPU-tier bytes of one average context, as vLLM stores it."
    )
    cpu_chunks: int | None = Field(
        default=None, ge=0, description="Chunks vLLM creates for cpuBytesToUse."
    )
    vllm_release: ShortText | None = Field(
        default=None,
        alias="vllmRelease",
        description="The vLLM release the figures are vLLM's own for (docs/sizing.md).",
    )


class ProbeResult(KubeModel):
    """fio results at the model's block size (random 75/25 read/write, iodepth 1)."""

    p50_seconds: float | None = Field(default=None, ge=0, description="Median block latency.")
    p99_seconds: float | None = Field(
        default=None, ge=0, description="99th percentile block latency; this lands in TTFT."
    )
    bandwidth_bytes_per_second: int | None = Field(
        default=None, ge=0, description="Read bandwidth during the probe."
    )
    measured_at: datetime | None = Field(default=None, description="When the probe finished.")
    buffered: bool | None = Field(
        default=None,
        description="True when the volume refused O_DIRECT and the probe fell back to "
        "buffered I/O (latencies are then optimistic).",
    )
    generation: int | None = Field(
        default=None,
        ge=0,
        description="The KVCacheTier generation the probe ran for; a newer spec re-probes.",
    )
    trigger: ShortText | None = Field(
        default=None,
        description="The kvcache.io/reprobe annotation value the probe answered.",
    )
    failures: int | None = Field(
        default=None, ge=0, description="Failed probe attempts since the last success."
    )
    last_failure: ShortText | None = Field(
        default=None, description="Why the last attempt failed, for people."
    )
    last_failure_time: datetime | None = Field(
        default=None, description="When the last attempt failed (retries back off from it)."
    )


_VIEW_REASON = Annotated[str, StringConstraints(max_length=2048)]


class LatencyView(KubeModel):
    """One request on an idle server: restoring the part of its prefix the tier holds."""

    prefill_seconds_per_token: float | None = Field(
        default=None, ge=0, description="t_prefill: compute time of one prompt token."
    )
    prefill_source: Literal["Measured", "BaselineTTFT"] | None = Field(
        default=None, description="Measured (vLLM's metrics) or BaselineTTFT ÷ context."
    )
    crossover_tokens: int | None = Field(
        default=None, ge=0, description="L = p99 ÷ t_prefill: a longer prefix restores faster."
    )
    tier_tokens: int | None = Field(
        default=None, ge=0, description="Tokens of an average prefix expected from the tier."
    )
    restore_seconds: float | None = Field(
        default=None, ge=0, description="p99 plus those tokens' blocks at the bandwidth."
    )
    recompute_seconds: float | None = Field(
        default=None, ge=0, description="Those tokens × t_prefill."
    )
    beneficial: bool | None = Field(default=None, description="Whether this view wins.")
    reason: _VIEW_REASON | None = Field(default=None, description="Why, for people.")


class ThroughputView(KubeModel):
    """A loaded server: restores cost no GPU time; the bandwidth is a capacity."""

    restore_tokens_per_second: float | None = Field(
        default=None, ge=0, description="Tokens per second the tier restores, all replicas."
    )
    gpu_seconds_saved_per_second: float | None = Field(
        default=None, ge=0, description="That capacity × t_prefill."
    )
    saved_seconds_per_request: float | None = Field(
        default=None, ge=0, description="Prefill one restore of the tier's part saves."
    )
    tail_seconds: float | None = Field(
        default=None, ge=0, description="The p99 a restoring request adds to its TTFT."
    )
    beneficial: bool | None = Field(default=None, description="Whether this view wins.")
    reason: _VIEW_REASON | None = Field(default=None, description="Why, for people.")


class TierStatus(KubeModel):
    """One provisioned tier."""

    name: DnsLabel = Field(description="Tier name, e.g. cpu, nvme, cephfs.")
    ready: bool | None = Field(default=None, description="Whether the tier is usable.")
    capacity_bytes: int | None = Field(default=None, ge=0, description="Capacity of the tier.")
    used_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Bytes in a disk tier's directory, by its evictor (the fullest pod's for "
        "an NVMe tier, which has a volume per pod); needs KVCachePolicy spec.metrics.",
    )
    claim_name: DnsSubdomain | None = Field(
        default=None, description="PersistentVolumeClaim backing a disk tier."
    )
    probe: ProbeResult | None = Field(default=None, description="Latest probe of the tier.")
    crossover_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Context length above which restoring from this tier beats recompute.",
    )
    restore_blocks_per_second: float | None = Field(
        default=None, ge=0, description="Blocks per second the tier can restore."
    )
    beneficial: bool | None = Field(
        default=None,
        description="Whether restoring from the tier beats recomputing, by the view that "
        "decided (decidedBy).",
    )
    decided_by: Literal["latency", "throughput", "both"] | None = Field(
        default=None,
        description="The view that decided: latency (one request on an idle server), "
        "throughput (a loaded server) or both.",
    )
    latency: LatencyView | None = Field(default=None, description="The latency view's figures.")
    throughput: ThroughputView | None = Field(
        default=None, description="The throughput view's figures."
    )


class PlannedAction(KubeModel):
    """One write Apply mode performs (or Plan mode would perform)."""

    action: Annotated[str, StringConstraints(min_length=1, max_length=32)] = Field(
        description="What happens to the object, e.g. Create, Patch, Delete."
    )
    api_version: ShortText | None = Field(default=None, description="API version of the object.")
    kind: Annotated[str, StringConstraints(min_length=1, max_length=63)] = Field(
        description="Kind of the object."
    )
    name: DnsSubdomain = Field(description="Name of the object.")
    namespace: DnsLabel | None = Field(
        default=None, description="Namespace of the object; absent for cluster-scoped objects."
    )
    summary: Annotated[str, StringConstraints(max_length=4096)] = Field(
        description="What the write does, for a person."
    )
    body: dict[str, Any] | None = Field(
        default=None,
        description="The object or patch body, as applied.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


def _count(description: str) -> Any:
    return Field(default=None, ge=0, description=description)


class RolePlan(KubeModel):
    """One role of an LLMInferenceService, sized by its own replicas and parallelism."""

    role: Literal["decode", "prefill"] = Field(
        description="decode: spec.template and spec.worker; prefill: spec.prefill."
    )
    templates: list[ShortText] | None = Field(
        default=None, max_length=4, description="The pod templates patched for this role."
    )
    replicas: int | None = _count("The role's replicas (LeaderWorkerSet groups when multi-node).")
    tensor: int | None = _count("Tensor-parallel size of one engine.")
    pipeline: int | None = _count("Pipeline-parallel size (stages across pods with a worker).")
    data: int | None = _count("Data-parallel ranks of one replica: each an engine of its own.")
    data_local: int | None = _count("Data-parallel ranks per pod (spec.parallelism.dataLocal).")
    pods_per_replica: int | None = _count("Pods of one replica (KServe's LeaderWorkerSet size).")
    engines_per_pod: int | None = _count("vLLM engines in one pod.")
    bytes_per_token_per_rank: int | None = _count(
        "KV bytes per token on one GPU rank (one pipeline stage's layers)."
    )
    cpu_bytes_to_use: int | None = _count("vLLM cpu_bytes_to_use of one engine.")
    cpu_bytes_per_pod: int | None = _count("The CPU tier one pod holds (per node).")
    cpu_tier_blocks: int | None = _count("Offload blocks in one engine's CPU tier.")
    pod_memory_bytes: int | None = _count("Memory added to each of the role's vLLM containers.")
    shm_bytes: int | None = _count("/dev/shm of each of the role's pods.")
    topology: Topology | None = Field(default=None, description="The role's tier topology.")


class SchedulerConfigMap(KubeModel):
    """The ConfigMap key, in the target's namespace, that holds the scheduler's config."""

    name: DnsSubdomain = Field(description="Name of the ConfigMap.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=CONFIGMAP_KEY)] = (
        Field(description="The key whose text is the EndpointPickerConfig.")
    )


class SchedulerPlan(KubeModel):
    """The router's CPU-tier prefix scorer, kept in step with the CPU tier."""

    plugin: ShortText = Field(description="The scheduler plugin kvtier sets.")
    block_size_tokens: int = Field(ge=1, description="The scorer's block size in tokens.")
    lru_capacity_per_server: int = Field(
        ge=0, description="lruCapacityPerServer: CPU-tier blocks behind one endpoint."
    )
    roles: list[Literal["decode", "prefill"]] | None = Field(
        default=None, max_length=2, description="The roles whose profiles use the scorer."
    )
    config_map: SchedulerConfigMap | None = Field(
        default=None,
        description="Where kvtier writes it when the config is in a ConfigMap "
        "(spec.router.scheduler.config.ref); absent when it is inline.",
    )


class PlanStatus(KubeModel):
    """What Apply mode writes, readable by a person."""

    summary: LongText | None = Field(default=None, description="The plan as free text.")
    actions: list[PlannedAction] | None = Field(
        default=None, max_length=64, description="The writes, in the order they happen."
    )
    roles: list[RolePlan] | None = Field(
        default=None,
        max_length=2,
        description="Per-role figures of an LLMInferenceService (decode, prefill).",
        json_schema_extra=list_map("role"),
    )
    scheduler: SchedulerPlan | None = Field(
        default=None, description="The scheduler's CPU-tier prefix scorer as kvtier sets it."
    )


class EffectiveValue(KubeModel):
    """One effective setting and where it came from."""

    field: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="Dotted path of the setting, e.g. model.kvCacheDtype or memory.headroom."
    )
    value: Annotated[str, StringConstraints(max_length=1024)] = Field(
        description="The effective value, as text."
    )
    source: ValueSource = Field(description="Default, Policy or Tier.")


class KVCacheTierStatus(KubeModel):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status reflects."
    )
    cpu_tier: ShortText | None = Field(
        default=None, description="CPU tier size for people, e.g. 128Gi (printer column)."
    )
    disk_tier: ShortText | None = Field(
        default=None, description="Disk tier for people, e.g. NVMe 2Ti (printer column)."
    )
    mode: Mode | None = Field(
        default=None,
        description="The mode in force: spec.mode, else the KVCachePolicy's default, else "
        "Apply (printer column).",
    )
    sizing: SizingStatus | None = Field(default=None, description="Sizing results.")
    tiers: list[TierStatus] | None = Field(
        default=None,
        max_length=8,
        description="Provisioned tiers.",
        json_schema_extra=list_map("name"),
    )
    plan: PlanStatus | None = Field(default=None, description="What Apply mode writes.")
    effective: list[EffectiveValue] | None = Field(
        default=None,
        max_length=64,
        description="Effective settings and their source (Default < Policy < Tier).",
        json_schema_extra=list_map("field"),
    )
    observed: ObservedStatus | None = Field(
        default=None,
        description="What vLLM's own metrics showed over the last window (KVCachePolicy "
        "spec.metrics); TierEffective is decided from it.",
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=32,
        description="Ready, Sized, TargetFound, PolicyCompliant, Provisioned, Applied, Probed, "
        "TierBeneficial, TierEffective, DiskPressure, Conflict, SchedulerSynced.",
        json_schema_extra=list_map("type"),
    )


class ObjectMeta(KubeModel):
    """The part of metav1.ObjectMeta the models read; the rest is kept as given."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    namespace: str | None = None


class KVCacheTier(KubeModel):
    """A whole KVCacheTier object, as read from YAML or the API."""

    api_version: Literal["kvcache.io/v1alpha1"] = "kvcache.io/v1alpha1"
    kind: Literal["KVCacheTier"] = "KVCacheTier"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: KVCacheTierSpec
    status: KVCacheTierStatus | None = None
