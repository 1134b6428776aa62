"""KVCachePolicy: the cluster-wide singleton `cluster` with defaults and guardrails."""

from __future__ import annotations

import posixpath
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from kvtier.api.common import (
    DNS1123_SUBDOMAIN,
    Condition,
    DnsLabel,
    DnsSubdomain,
    KubeModel,
    NonNegativeQuantity,
    PositiveQuantity,
    VLLMVersion,
    cel,
    list_map,
    quantity_rules,
    validations,
    vllm_version_rules,
)
from kvtier.api.observed import MetricsSpec
from kvtier.api.tier import DiskType, KVCacheDtype, Mode, ObjectMeta
from kvtier.evict.policy import DEFAULT_HIGH, DEFAULT_LOW, DEFAULT_PROTECT_SECONDS
from kvtier.evict.run import DEFAULT_INTERVAL_SECONDS

POLICY_NAME = "cluster"
POLICY_NAME_MESSAGE = "KVCachePolicy must be named 'cluster'"


class VolumeSource(StrEnum):
    """How kvtier exposes a mountPath pool: as `local` PersistentVolumes on a directory prepared
    on each node (docs/nvme.md). Pods only ever see a PVC."""

    LOCAL = "Local"
    # Refused at admission (HOST_PATH_MESSAGE); still named so an old policy learns why.
    HOST_PATH = "HostPath"


class Retention(StrEnum):
    DELETE = "Delete"
    RETAIN = "Retain"


class NonBeneficialAction(StrEnum):
    KEEP = "Keep"
    DROP = "Drop"


# --- defaults for optional KVCacheTier fields ---------------------------------------------------


class ProbeDefaults(KubeModel):
    """Defaults for spec.probe of a KVCacheTier."""

    enabled: bool | None = Field(default=None, description="Probe disk tiers (built-in: true).")
    runtime_seconds: int | None = Field(
        default=None, ge=1, le=3600, description="fio runtime in seconds (built-in: 60)."
    )


class TierDefaults(KubeModel):
    """Values for KVCacheTier fields a tier leaves out."""

    mode: Mode | None = Field(default=None, description="Default spec.mode (built-in: Apply).")
    kv_cache_dtype: KVCacheDtype | None = Field(
        default=None, description="Default spec.model.kvCacheDtype (built-in: auto)."
    )
    block_size_tokens: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Default spec.model.blockSizeTokens (built-in: 16).",
    )
    disk_type: DiskType | None = Field(
        default=None, description="Default spec.disk.type (built-in: Auto)."
    )
    vllm_version: VLLMVersion | None = Field(
        default=None,
        alias="vllmVersion",
        description="Default spec.model.vllmVersion for targets whose image does not say "
        "(built-in: 0.24, the study's).",
        json_schema_extra=vllm_version_rules("spec.defaults.vllmVersion"),
    )
    probe: ProbeDefaults | None = Field(default=None, description="Defaults for spec.probe.")


# --- guardrails ---------------------------------------------------------------------------------

_MOUNT_PATH_MESSAGE = (
    "spec.nvmePools[].mountPath must be an absolute path without '.' or '..' segments"
)
HOST_PATH_MESSAGE = (
    "spec.nvmePools[].volumeSource: HostPath is no longer supported: DirectoryOrCreate makes "
    "root-owned 0755 directories without a container SELinux label, which restricted-v2 pods "
    "cannot write; use Local on a prepared directory or storageClassName (docs/nvme.md)"
)
POOL_SOURCE_MESSAGE = (
    "spec.nvmePools[]: set exactly one of mountPath (kvtier-made local PersistentVolumes) or "
    "storageClassName (per-pod claims of a provisioner's StorageClass)"
)
CLASS_VOLUME_SOURCE_MESSAGE = (
    "spec.nvmePools[].volumeSource applies to mountPath pools only: a storageClassName pool's "
    "volumes come from its provisioner"
)


class NVMePool(KubeModel):
    """Host NVMe space the platform team offers; tiers name the pool, never a path. Either a
    StorageClass of a dynamic local provisioner (storageClassName) or a directory on each node
    that kvtier exposes as local PersistentVolumes (mountPath)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("has(self.mountPath) != has(self.storageClassName)", POOL_SOURCE_MESSAGE),
            cel(
                "!has(self.storageClassName) || !has(self.volumeSource)",
                CLASS_VOLUME_SOURCE_MESSAGE,
                field_path=".volumeSource",
            ),
        )
    )

    name: DnsLabel = Field(description="Pool name that KVCacheTiers use in spec.disk.nvme.pool.")
    storage_class_name: DnsSubdomain | None = Field(
        default=None,
        description="StorageClass of a dynamic local provisioner (LVM Storage / TopoLVM, Local "
        "Storage Operator), ideally WaitForFirstConsumer: each replica gets an ephemeral claim "
        "of it, and CSIStorageCapacity objects, where its driver publishes them, are checked "
        "against the tier's size. Excludes mountPath.",
    )
    mount_path: (
        Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=r"^(/[^/]+)+$")]
        | None
    ) = Field(
        default=None,
        description="Absolute path where the NVMe file system is mounted on each node, "
        "e.g. /mnt/nvme (no trailing slash, no empty, '.' or '..' segments); kvtier makes a "
        "local PersistentVolume on it per node and tier. Excludes storageClassName.",
        json_schema_extra=validations(
            cel("!self.matches('/\\\\.\\\\.?(/|$)')", _MOUNT_PATH_MESSAGE)
        ),
    )
    node_selector: (
        dict[
            Annotated[str, StringConstraints(min_length=1, max_length=317)],
            Annotated[str, StringConstraints(max_length=63)],
        ]
        | None
    ) = Field(
        default=None,
        max_length=32,
        description="Labels of the nodes that have this mount; all nodes when omitted.",
    )
    capacity_per_node: PositiveQuantity = Field(
        description="Space kvtier may hand out on each node, e.g. 3Ti (for a storageClassName "
        "pool: the largest claim a replica gets).",
        json_schema_extra=quantity_rules("spec.nvmePools[].capacityPerNode"),
    )
    volume_source: VolumeSource | None = Field(
        default=None,
        description="Local (default, mountPath pools only): local PersistentVolumes, the "
        "directory must exist and be prepared (docs/nvme.md). HostPath is refused.",
        json_schema_extra=validations(cel("self != 'HostPath'", HOST_PATH_MESSAGE)),
    )
    retention: Retention | None = Field(
        default=None,
        description="What happens to this pool's volumes when their tier is deleted; "
        "defaults to spec.storageRetention.",
    )

    @field_validator("mount_path")
    @classmethod
    def _clean_absolute(cls, value: str | None) -> str | None:
        # The pattern already rejects empty segments; normpath only differs on '.' and '..'.
        if value is not None and posixpath.normpath(value) != value:
            raise ValueError(_MOUNT_PATH_MESSAGE)
        return value

    @field_validator("volume_source")
    @classmethod
    def _no_host_path(cls, value: VolumeSource | None) -> VolumeSource | None:
        if value is VolumeSource.HOST_PATH:
            raise ValueError(HOST_PATH_MESSAGE)
        return value

    @model_validator(mode="after")
    def _one_source(self) -> NVMePool:
        # The same rules as the CEL above, so the CLI agrees with admission.
        if (self.mount_path is None) == (self.storage_class_name is None):
            raise ValueError(POOL_SOURCE_MESSAGE)
        if self.storage_class_name is not None and self.volume_source is not None:
            raise ValueError(CLASS_VOLUME_SOURCE_MESSAGE)
        return self


# A ceph-csi clusterID: a key of the CSI driver's cluster configuration (the Ceph cluster's
# namespace on Rook, another string on ODF clusters upgraded from before 4.19).
CephClusterID = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
]
# A CSI driver name: a DNS-1123 subdomain of at most 63 characters (CSIDriver validation).
CSIDriverName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=DNS1123_SUBDOMAIN)
]


class Replica1Pool(KubeModel):
    """A CephFS file system of kvtier's own whose data pool keeps one copy of each KV block:
    losing an OSD loses only cache. kvtier creates and owns a Rook CephFilesystem for it
    (ODF runs Rook, so this works on both) and, once Rook reports it Ready, a StorageClass
    whose `pool` parameter names the data pool. It never changes a file system or pool list
    another operator owns."""

    enabled: bool | None = Field(
        default=None, description="Use a replica-1 data pool (built-in: false)."
    )
    ceph_cluster_namespace: DnsLabel | None = Field(
        default=None,
        description="Namespace of the Ceph cluster (Rook's CephCluster; on ODF the "
        "StorageCluster's): kvtier's CephFilesystem goes there, and the StorageClass names "
        "the rook-csi-cephfs-* secrets there (built-in: openshift-storage).",
    )
    filesystem_name: DnsLabel | None = Field(
        default=None,
        description="Name of the CephFilesystem kvtier creates and owns; one of that name it "
        "did not create is left alone and reported (built-in: kvtier-kvcache).",
    )
    pool_name: DnsLabel | None = Field(
        default=None,
        description="The file system's data pool (replica size 1); Ceph names it "
        "<filesystemName>-<poolName> (built-in: kvcache).",
    )
    storage_class_name: DnsSubdomain | None = Field(
        default=None,
        description="StorageClass whose pool parameter names the replica-1 pool "
        "(built-in: <CephFS storage class>-<poolName>).",
    )
    csi_driver: CSIDriverName | None = Field(
        default=None,
        description="CephFS CSI driver, the StorageClass's provisioner; Rook names it "
        "<Rook operator namespace>.cephfs.csi.ceph.com "
        "(built-in: <cephClusterNamespace>.cephfs.csi.ceph.com).",
    )
    cluster_id: CephClusterID | None = Field(
        default=None,
        alias="clusterID",
        description="The StorageClass's clusterID parameter (built-in: cephClusterNamespace). "
        "ODF clusters upgraded from before 4.19 use another one: copy it from the clusterID "
        "of their CephFS StorageClass (ocs-storagecluster-cephfs).",
    )


class CephFSPolicy(KubeModel):
    """The shared CephFS tier."""

    storage_class_name: DnsSubdomain | None = Field(
        default=None,
        description="StorageClass for CephFS tiers (built-in: ocs-storagecluster-cephfs).",
    )
    throughput_ceiling: PositiveQuantity | None = Field(
        default=None,
        description="Bytes per second CephFS delivers at most, used to plan before a probe "
        "measures (built-in: 205M, the protocol ceiling seen on ODF 4.18).",
        json_schema_extra=quantity_rules("spec.cephfs.throughputCeiling"),
    )
    replica1: Replica1Pool | None = Field(
        default=None, description="Replica-1 data pool, in a CephFilesystem of kvtier's own."
    )


class MemoryPolicy(KubeModel):
    """How much host memory a CPU tier may take."""

    overhead_factor: float | None = Field(
        default=None,
        ge=1,
        le=10,
        description="Pod memory per byte of CPU tier: pinned and shared buffers reach ~1.9x the "
        "offload size (built-in: 2.0).",
    )
    headroom: NonNegativeQuantity | None = Field(
        default=None,
        description="Memory added to the pod on top of the tier (built-in: 4Gi).",
        json_schema_extra=quantity_rules("spec.memory.headroom", allow_zero=True),
    )
    max_node_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Largest fraction of a node's memory the CPU tier may take (built-in: 0.5).",
    )


class ObjectStorePolicy(KubeModel):
    """Guardrails for S3 tiers, whose tail latency lands in time to first token."""

    allowed: bool | None = Field(
        default=None, description="Whether KVCacheTiers may use ObjectStore (built-in: false)."
    )
    max_p99_seconds: float | None = Field(
        default=None,
        gt=0,
        le=60,
        description="Largest probed p99 block latency an object-store tier may have "
        "(built-in: 0.25).",
    )


# The cron schedule of re-probing, field by field with each field's range, as croniter (which
# the operator runs it with) and Kubernetes' CronJob read it: an item is *, a value or a range
# a-b, with an optional /step; a field is a comma list of items. No backslash, so the
# expression goes into a CEL string as it is.
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_DAYS = "sun|mon|tue|wed|thu|fri|sat"
CRON_FIELDS: tuple[tuple[str, str, str], ...] = (  # (name, range, value expression)
    ("minute", "0-59", "[0-5]?[0-9]"),
    ("hour", "0-23", "([01]?[0-9]|2[0-3])"),
    ("day of month", "1-31", "(0?[1-9]|[12][0-9]|3[01])"),
    ("month", "1-12 or jan-dec", f"(0?[1-9]|1[0-2]|(?i:{_MONTHS}))"),
    ("day of week", "0-7 or sun-sat", f"([0-7]|(?i:{_DAYS}))"),
)


def cron_field(value: str, any_day: bool = False) -> str:
    """The expression of one cron field whose values match `value`; `any_day`: the day
    fields, which also take a lone `?`."""
    item = f"([*]|{value}(-{value})?)(/[1-9][0-9]*)?"
    items = f"{item}(,{item})*"
    return f"([?]|{items})" if any_day else items


CRON_SCHEDULE = (
    "^("
    + "|".join(CRON_MACROS)
    + "|"
    + " +".join(cron_field(v, any_day=n.startswith("day")) for n, _, v in CRON_FIELDS)
    + ")$"
)
CRON_RULE = (
    "5 fields separated by spaces: "
    + ", ".join(f"{name} {span}" for name, span, _ in CRON_FIELDS)
    + " (0 and 7 are Sunday), each a comma list of *, a value or a range a-b with an optional "
    "/step; or one of " + ", ".join(CRON_MACROS)
)
CRON_MESSAGE = f"spec.probing.schedule must be a cron schedule: {CRON_RULE}"


class ProbingPolicy(KubeModel):
    """When storage probes may run."""

    # The shape is the model's; the fields' ranges are checked at admission (a CEL rule) and
    # by the operator (policy_ready.py): a schedule stored before the rule existed must not
    # invalidate the rest of the policy, only turn re-probing off, with a condition.
    model_config = ConfigDict(
        json_schema_extra=validations(
            {
                **cel(
                    f"!has(self.schedule) || self.schedule.matches('{CRON_SCHEDULE}')",
                    CRON_MESSAGE,
                    field_path=".schedule",
                    reason="FieldValueInvalid",
                ),
                "messageExpression": "'spec.probing.schedule \"' + self.schedule + '\" is not a "
                f"cron schedule: {CRON_RULE}'",
            }
        )
    )

    schedule: (
        Annotated[
            str,
            StringConstraints(
                max_length=128,
                pattern=r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4}\S+)$",
            ),
        ]
        | None
    ) = Field(
        default=None,
        description="Cron schedule (5 fields or @daily etc., UTC) for re-probing tiers; "
        "probes run once after provisioning when omitted.",
    )
    allow_while_serving: bool | None = Field(
        default=None,
        description="Allow probes on a tier the model server is using; they compete with "
        "serving I/O (built-in: false).",
    )


WATERMARKS_MESSAGE = "spec.eviction.lowWatermark must be below spec.eviction.highWatermark"
HIGH_ALONE_MESSAGE = (
    "spec.eviction.highWatermark must be above the built-in lowWatermark "
    f"({DEFAULT_LOW:g}) unless lowWatermark is set too"
)
LOW_ALONE_MESSAGE = (
    "spec.eviction.lowWatermark must be below the built-in highWatermark "
    f"({DEFAULT_HIGH:g}) unless highWatermark is set too"
)


class EvictionPolicy(KubeModel):
    """How the evictor beside every disk tier keeps it from filling (`kvtier evict`,
    docs/eviction.md): vLLM's fs tier never deletes a block itself."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.highWatermark) || !has(self.lowWatermark) || "
                "self.lowWatermark < self.highWatermark",
                WATERMARKS_MESSAGE,
                field_path=".lowWatermark",
            ),
            cel(
                f"has(self.lowWatermark) || !has(self.highWatermark) || "
                f"self.highWatermark > {DEFAULT_LOW!r}",
                HIGH_ALONE_MESSAGE,
                field_path=".highWatermark",
            ),
            cel(
                f"has(self.highWatermark) || !has(self.lowWatermark) || "
                f"self.lowWatermark < {DEFAULT_HIGH!r}",
                LOW_ALONE_MESSAGE,
                field_path=".lowWatermark",
            ),
        )
    )

    high_watermark: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Fraction of the tier's capacity (or of its volume, whichever is fuller) "
        f"at which the evictor starts deleting the least recently used blocks (built-in: "
        f"{DEFAULT_HIGH:g}).",
    )
    low_watermark: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description=f"Fraction it deletes down to (built-in: {DEFAULT_LOW:g}).",
    )
    protect_seconds: int | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="A block file read or written within this many seconds is never deleted "
        f"(built-in: {DEFAULT_PROTECT_SECONDS}).",
    )
    interval_seconds: int | None = Field(
        default=None,
        ge=5,
        le=3600,
        description=f"Seconds between passes (built-in: {DEFAULT_INTERVAL_SECONDS:g}).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> EvictionPolicy:
        # The CEL rules above, so the CLI agrees with admission.
        high = DEFAULT_HIGH if self.high_watermark is None else self.high_watermark
        low = DEFAULT_LOW if self.low_watermark is None else self.low_watermark
        if low >= high:
            both = self.high_watermark is not None and self.low_watermark is not None
            raise ValueError(
                WATERMARKS_MESSAGE
                if both
                else HIGH_ALONE_MESSAGE
                if self.high_watermark is not None
                else LOW_ALONE_MESSAGE
            )
        return self


class KVCachePolicySpec(KubeModel):
    """Cluster-wide defaults and guardrails for KVCacheTiers, owned by the platform team."""

    defaults: TierDefaults | None = Field(
        default=None, description="Values for optional KVCacheTier fields."
    )
    nvme_pools: list[NVMePool] | None = Field(
        default=None,
        max_length=32,
        description="Named host NVMe pools.",
        json_schema_extra=list_map("name"),
    )
    cephfs: CephFSPolicy | None = Field(default=None, description="The CephFS tier.")
    memory: MemoryPolicy | None = Field(default=None, description="Host memory limits.")
    object_store: ObjectStorePolicy | None = Field(
        default=None, description="Object-store tier guardrails."
    )
    probing: ProbingPolicy | None = Field(default=None, description="Probe scheduling.")
    non_beneficial_tier: NonBeneficialAction | None = Field(
        default=None,
        description="What to do with a disk tier whose probe shows restore does not beat "
        "recompute: Keep it (and report TierBeneficial=False) or Drop it (built-in: Keep).",
    )
    storage_retention: Retention | None = Field(
        default=None,
        description="What happens to a tier's volumes when the KVCacheTier is deleted "
        "(built-in: Delete; the data is only cache).",
    )
    metrics: MetricsSpec | None = Field(
        default=None,
        description="Where to read the model servers' vLLM metrics, to tell whether each "
        "tier pays off (status.observed, TierEffective); off when omitted.",
    )
    eviction: EvictionPolicy | None = Field(
        default=None,
        description="Watermarks, protection age and interval of the evictor kvtier runs "
        "beside every disk tier.",
    )

    @field_validator("nvme_pools")
    @classmethod
    def _unique_pool_names(cls, pools: list[NVMePool] | None) -> list[NVMePool] | None:
        # The API server enforces this through the list-map key; the CLI must agree.
        names = [p.name for p in pools or []]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"spec.nvmePools: duplicate pool names {duplicates}")
        return pools


class KVCachePolicyStatus(KubeModel):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status reflects."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=32,
        description="Conditions of the policy, e.g. Ready.",
        json_schema_extra=list_map("type"),
    )


class KVCachePolicy(KubeModel):
    """The whole KVCachePolicy object."""

    model_config = ConfigDict(
        json_schema_extra=validations(cel("self.metadata.name == 'cluster'", POLICY_NAME_MESSAGE))
    )

    api_version: Literal["kvcache.io/v1alpha1"] = "kvcache.io/v1alpha1"
    kind: Literal["KVCachePolicy"] = "KVCachePolicy"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: KVCachePolicySpec = Field(default_factory=KVCachePolicySpec)
    status: KVCachePolicyStatus | None = None

    @model_validator(mode="after")
    def _named_cluster(self) -> KVCachePolicy:
        if self.metadata.name is not None and self.metadata.name != POLICY_NAME:
            raise ValueError(POLICY_NAME_MESSAGE)
        return self
