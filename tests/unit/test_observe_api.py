"""spec.metrics of the KVCachePolicy and status.observed of a KVCacheTier, as models and CRDs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvtier.api.crd import KVCACHEPOLICY, KVCACHETIER, crd_document
from kvtier.api.observed import MetricsSpec
from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierStatus

THANOS = "https://thanos-querier.openshift-monitoring.svc:9091"


def test_a_prometheus_source_reads_with_defaults_left_out() -> None:
    spec = KVCachePolicySpec.model_validate({"metrics": {"prometheus": {"url": THANOS}}})
    assert spec.metrics is not None and spec.metrics.prometheus is not None
    assert spec.metrics.prometheus.url == THANOS
    assert spec.metrics.window_seconds is None  # the built-in applies


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"prometheus": {"url": THANOS}, "directScrape": {}},
    ],
)
def test_exactly_one_source(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="exactly one of prometheus and directScrape"):
        MetricsSpec.model_validate(body)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prometheus": {"url": "thanos:9091"}}, "url"),
        ({"prometheus": {"url": THANOS, "podLabel": "pod name"}}, "podLabel"),
        ({"directScrape": {"port": 70000}}, "port"),
        ({"directScrape": {}, "windowSeconds": 1}, "windowSeconds"),
        ({"directScrape": {}, "thresholds": {"minHitRatio": 2}}, "minHitRatio"),
    ],
)
def test_bad_values_name_their_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        MetricsSpec.model_validate(body)
    assert field in str(err.value)


def test_the_crd_refuses_two_sources_at_admission() -> None:
    schema = crd_document(KVCACHEPOLICY)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    metrics = schema["properties"]["spec"]["properties"]["metrics"]
    rules = [r["rule"] for r in metrics["x-kubernetes-validations"]]
    assert "has(self.prometheus) != has(self.directScrape)" in rules


def test_observed_status_and_the_wide_columns() -> None:
    status = KVCacheTierStatus.model_validate(
        {
            "observed": {
                "externalHitRatio": 0.75,
                "tPrefillSource": "Measured",
                "tiers": [{"tier": "1:fs"}],
            }
        }
    )
    assert status.observed is not None and status.observed.t_prefill_source == "Measured"
    columns = crd_document(KVCACHETIER)["spec"]["versions"][0]["additionalPrinterColumns"]
    wide = {c["name"]: c for c in columns if c.get("priority") == 1}
    assert wide["Effective"]["jsonPath"] == '.status.conditions[?(@.type=="TierEffective")].status'
    assert wide["Hit Ratio"]["jsonPath"] == ".status.observed.externalHitRatio"
    assert wide["Load/Block"]["jsonPath"] == ".status.observed.loadSecondsPerBlock"
