"""Observed tier health: where vLLM's metrics come from (KVCachePolicy spec.metrics), and what
they showed (KVCacheTier status.observed)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from kvtier.api.common import KubeModel, ShortText, cel, list_map, validations

_ONE_SOURCE = "spec.metrics needs exactly one of prometheus and directScrape"

LabelName = Annotated[str, StringConstraints(max_length=128, pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")]
MetricsPath = Annotated[str, StringConstraints(max_length=256, pattern=r"^/[a-zA-Z0-9_./-]*$")]
HttpUrl = Annotated[str, StringConstraints(max_length=2048, pattern=r"^https?://[^\s/?#]+[^\s]*$")]


class PrometheusCA(StrEnum):
    """Which CA the operator trusts for an https Prometheus: OpenShift's service CA (the
    Thanos Querier's serving certificate), the cluster's CA, or the image's system store."""

    SERVICE_CA = "ServiceCA"
    CLUSTER_CA = "ClusterCA"
    SYSTEM = "System"


class PrometheusSourceSpec(KubeModel):
    """The cluster's Prometheus HTTP API (on OpenShift: the Thanos Querier)."""

    url: HttpUrl = Field(
        description="Base URL of the Prometheus HTTP API, e.g. "
        "https://thanos-querier.openshift-monitoring.svc:9091."
    )
    service_account_token: bool | None = Field(
        default=None,
        description="Send the operator's ServiceAccount token as a bearer token (built-in: true).",
    )
    ca: PrometheusCA | None = Field(
        default=None, description="CA that signs an https URL's certificate (built-in: ServiceCA)."
    )
    namespace_label: LabelName | None = Field(
        default=None, description="Label holding the pod's namespace (built-in: namespace)."
    )
    pod_label: LabelName | None = Field(
        default=None, description="Label holding the pod's name (built-in: pod)."
    )


class DirectScrapeSpec(KubeModel):
    """Scrape the target's pods directly, where no Prometheus exists."""

    port: int | None = Field(
        default=None, ge=1, le=65535, description="vLLM's HTTP port (built-in: 8000)."
    )
    path: MetricsPath | None = Field(default=None, description="Metrics path (built-in: /metrics).")


class EffectiveThresholds(KubeModel):
    """When TierEffective turns False, and how much traffic it needs to tell."""

    min_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Prompt tokens in a window below which TierEffective is Unknown "
        "(built-in: 10000).",
    )
    min_hit_ratio: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="External prefix-cache hit ratio below which the tier serves no hits "
        "(built-in: 0.01).",
    )
    max_stores_dropped: int | None = Field(
        default=None,
        ge=0,
        description="Offload stores dropped in a window above which the tier cannot keep up "
        "(built-in: 0).",
    )
    confirmations: int | None = Field(
        default=None,
        ge=1,
        le=10,
        description="Evaluations in a row that must agree before TierEffective flips "
        "(built-in: 2).",
    )


class MetricsSpec(KubeModel):
    """Where the operator reads the model servers' vLLM metrics to tell whether tiers pay off."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("has(self.prometheus) != has(self.directScrape)", _ONE_SOURCE)
        )
    )

    prometheus: PrometheusSourceSpec | None = Field(
        default=None, description="The cluster's Prometheus HTTP API."
    )
    direct_scrape: DirectScrapeSpec | None = Field(
        default=None, description="Scrape the target's pods directly."
    )
    window_seconds: int | None = Field(
        default=None,
        ge=10,
        le=86400,
        description="The window the figures cover (built-in: 300).",
    )
    interval_seconds: int | None = Field(
        default=None,
        ge=5,
        le=3600,
        description="How often each tier is evaluated (built-in: 60).",
    )
    thresholds: EffectiveThresholds | None = Field(
        default=None, description="TierEffective thresholds."
    )

    @model_validator(mode="after")
    def _one_source(self) -> MetricsSpec:
        if (self.prometheus is None) == (self.direct_scrape is None):
            raise ValueError(_ONE_SOURCE)
        return self


def _figure(description: str) -> Any:
    return Field(default=None, ge=0, description=description)


class ObservedTier(KubeModel):
    """One tier of vLLM's tiering spec, by vLLM's tier label (vLLM 0.33 and later)."""

    tier: ShortText = Field(description='vLLM\'s tier label, e.g. "0:primary" or "1:fs".')
    chunk_hits: float | None = _figure("Chunk lookups the tier answered in the window.")
    chunk_hit_ratio: float | None = _figure("Chunk hits over chunk queries.")
    read_bytes_per_second: float | None = _figure("Bytes read from the tier per second of reads.")
    stores_dropped: float | None = _figure("Stores dropped by the tier's backpressure.")


class ObservedStatus(KubeModel):
    """What vLLM's own metrics showed over the last window."""

    read_at: datetime | None = Field(
        default=None,
        description=(
            "When the metrics were read that gave these figures; a later reading with the"
            " same figures leaves the status as it is."
        ),
    )
    window_seconds: float | None = _figure("The window the figures cover.")
    source: Literal["Prometheus", "DirectScrape"] | None = Field(
        default=None, description="Where they were read."
    )
    prompt_tokens: float | None = _figure("Prompt tokens in the window.")
    tokens_from_offload: float | None = _figure("Prompt tokens loaded from the offload tiers.")
    tokens_recomputed: float | None = _figure("Prompt tokens computed locally.")
    tokens_local_hit: float | None = _figure("Prompt tokens hit in the GPU prefix cache.")
    external_hit_ratio: float | None = _figure("External prefix-cache hits over queries.")
    restore_bytes_per_second: float | None = _figure("Restore throughput (load bytes per second).")
    load_seconds_per_block: float | None = _figure("Mean load time of one offload block.")
    blocks_restored: float | None = _figure("Offload blocks loaded in the window.")
    stores_dropped: float | None = _figure("Offload stores dropped (allocation, backpressure).")
    measured_t_prefill_seconds: float | None = _figure(
        "Prefill seconds per locally computed prompt token, measured in the window."
    )
    t_prefill_seconds: float | None = _figure("The t_prefill the verdict used.")
    t_prefill_source: Literal["Baseline", "Measured"] | None = Field(
        default=None,
        description="Baseline: spec.probe.baselineTTFTSeconds over the average context; "
        "Measured: from the window.",
    )
    crossover_tokens: float | None = _figure(
        "Observed load time per block over t_prefill: contexts above it restore faster."
    )
    tiers: list[ObservedTier] | None = Field(
        default=None,
        max_length=8,
        description="Per-tier figures.",
        json_schema_extra=list_map("tier"),
    )
    pending_status: Literal["True", "False", "Unknown"] | None = Field(
        default=None, description="A TierEffective status waiting for confirmation."
    )
    pending_count: int | None = Field(
        default=None, ge=0, description="Evaluations in a row that wanted pending_status."
    )
