"""The PromQL kvtier sends, and Prometheus API answers read back as snapshots (pure).

Raw counters are asked at two instants a window apart: an instant selector keeps metric
names (functions such as increase() drop them), so one query returns every series kvtier
reads, and the increase is computed here exactly as for direct scrapes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.observe.series import READ, SeriesKey, Snapshot, key_of


@dataclass(frozen=True)
class Selection:
    """Which series belong to a target: its namespace and its pods' name prefix, by the
    label names the cluster's scrape configuration gives them."""

    namespace: str
    pod_prefix: str
    namespace_label: str = "namespace"
    pod_label: str = "pod"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def counters_query(sel: Selection, names: Sequence[str] = READ) -> str:
    """One instant query for every counter kvtier reads of the selected pods."""
    alternatives = "|".join(re.escape(n) for n in names)
    pods = re.escape(sel.pod_prefix) + ".*"
    return (
        f'{{__name__=~"{_quote(alternatives)}",'
        f'{sel.namespace_label}="{_quote(sel.namespace)}",'
        f'{sel.pod_label}=~"{_quote(pods)}"}}'
    )


class BadAnswer(ValueError):
    """The API answered, but not with an instant vector."""


def snapshot_from_vector(data: Mapping[str, Any], pod_label: str, at: float) -> Snapshot:
    """The `data` of a successful /api/v1/query answer as a Snapshot. Series that differ
    only in labels kvtier does not keep (engine, instance) are added up per pod."""
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise BadAnswer(f"expected an instant vector, got resultType {data.get('resultType')!r}")
    values: dict[SeriesKey, float] = {}
    for item in data["result"]:
        metric = item.get("metric") or {}
        name = metric.get("__name__")
        value = item.get("value")
        if not isinstance(name, str) or not isinstance(value, list) or len(value) != 2:
            raise BadAnswer(f"malformed sample {str(item)[:120]}")
        key = key_of(name, metric, str(metric.get(pod_label, "")))
        values[key] = values.get(key, 0.0) + float(value[1])
    return Snapshot(at, values)
