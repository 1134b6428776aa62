"""Record vLLM's own Prometheus metric definitions in tests/fixtures/vllm-metrics/<version>.json.

Runs INSIDE a vLLM virtualenv made by hack/conformance/run (never in the repo's .venv), from
the repository root, like harness.py, whose platform emulation and config builders it reuses
(no GPU). For each kv-transfer-config shape kvtier renders (CPU only, CPU + fs tier) it builds
a VllmConfig and constructs vLLM's own PrometheusStatLogger, which registers every metric the
engine front end and the OffloadingConnector export. The registry then holds vLLM's names,
types, help texts, label names, histogram buckets and the label values vLLM creates up front
(e.g. `source` of prompt_tokens_by_source). Tier label values ("0:primary", "1:fs") are made at
run time by the tiering manager; they are asked of vLLM's own TieringMetricsTracker where the
release has one. Nothing is served or observed: only definitions are recorded.

The exposition the tests serve (kvtier.observe.exposition) is generated from this file, so a
metric vLLM renames or relabels shows up as a fixture diff in `make conformance`. Its
provenance names the vLLM wheel and hashes this script's sources and the file's body
(golden_provenance.py), as the harness's golden file does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import logging
import math
import os
import pathlib
import platform
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import golden_provenance

# harness sets up the emulated platform before vLLM's configs load.
import harness
import prometheus_client
import vllm

MODEL = "llama-3.1-8b"
CPU_BYTES = 256 << 20
# Label names vLLM fills per engine; every other label's created values are recorded.
ENGINE_LABELS = ("model_name", "engine")


def transfer_configs(root_dir: str) -> dict[str, dict[str, Any]]:
    """The kv-transfer-config shapes kvtier renders: CPU only, and CPU plus one fs tier."""
    connector = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    return {
        "cpu": {**connector, "kv_connector_extra_config": {"cpu_bytes_to_use": CPU_BYTES}},
        "cpu+fs": {
            **connector,
            "kv_connector_extra_config": {
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": CPU_BYTES,
                "block_size": 16,
                "eviction_policy": "lru",
                "secondary_tiers": [{"type": "fs", "root_dir": root_dir}],
            },
        },
    }


def _vllm_collectors() -> list[Any]:
    registry = prometheus_client.REGISTRY
    return [
        c
        for c in list(registry._collector_to_names)
        if str(getattr(c, "_name", "")).startswith("vllm:")
    ]


def _unregister_vllm() -> None:
    for collector in _vllm_collectors():
        prometheus_client.REGISTRY.unregister(collector)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def describe(collector: Any) -> dict[str, Any]:
    labels = list(collector._labelnames)
    entry: dict[str, Any] = {
        "name": collector._name,
        "type": collector._type,
        "help": collector._documentation,
        "labels": labels,
    }
    bounds = getattr(collector, "_upper_bounds", None)
    if bounds is not None:
        entry["buckets"] = [_number(b) for b in bounds if not math.isinf(b)]
    values: dict[str, set[str]] = {}
    for key in getattr(collector, "_metrics", {}):
        for name, value in zip(labels, key, strict=True):
            if name not in ENGINE_LABELS:
                values.setdefault(name, set()).add(str(value))
    if values:
        entry["labelValues"] = {k: sorted(v) for k, v in sorted(values.items())}
    return entry


def tier_labels(tier_types: list[str]) -> list[str] | None:
    """vLLM's own tier label values, primary first; None where the release has no tracker."""
    try:
        from vllm.v1.kv_offload.tiering.metrics import TieringMetricsTracker
    except ImportError:
        return None
    tracker = TieringMetricsTracker(tier_types, num_primary_chunks=1, primary_chunk_size=1)
    return [tracker.primary_tier_label[0]] + [
        tracker.tier_label(i)[0] for i in range(len(tier_types))
    ]


def record(mc: Any, transfer: dict[str, Any]) -> dict[str, Any]:
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    _unregister_vllm()
    vc = harness.vllm_config(mc, 1, "auto", 16, None, transfer)
    with contextlib.redirect_stdout(io.StringIO()):
        PrometheusStatLogger(vc, engine_indexes=[0])
    metrics = sorted((describe(c) for c in _vllm_collectors()), key=lambda m: m["name"])
    tiers = [t["type"] for t in transfer["kv_connector_extra_config"].get("secondary_tiers", [])]
    out: dict[str, Any] = {"kvConnectorExtraConfig": transfer["kv_connector_extra_config"]}
    if tiers:
        out["tierLabels"] = tier_labels(tiers)
    out["metrics"] = metrics
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--expect-version", help="fail unless this vLLM release is imported")
    parser.add_argument(
        "--install-report", required=True, help="pip's install report of this virtualenv"
    )
    args = parser.parse_args()
    if args.expect_version and vllm.__version__ != args.expect_version:
        print(f"vLLM {vllm.__version__} imported, {args.expect_version} expected", file=sys.stderr)
        return 2
    logging.disable(logging.CRITICAL)
    started = time.monotonic()
    item = next(m for m in harness.catalog_models() if m["model"] == MODEL)
    configs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kvtier-model-") as model_dir:
        config = dict(item["config"])
        config.pop("quantization_config", None)
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        with contextlib.redirect_stdout(io.StringIO()):
            mc = harness.model_config(model_dir, "auto")
        for name, transfer in transfer_configs("/mnt/kv-cache").items():
            configs[name] = record(mc, transfer)
    document = {
        "provenance": {
            "vllm": vllm.__version__,
            "prometheusClient": harness._version("prometheus_client"),
            "python": platform.python_version(),
            "platform": harness.EMULATED_PLATFORM,
            "model": MODEL,
            "source": "vllm.v1.metrics.loggers.PrometheusStatLogger, constructed per config; "
            "tier labels from vllm.v1.kv_offload.tiering.metrics.TieringMetricsTracker",
            "command": "hack/conformance/run (hack/conformance/metrics.py)",
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.monotonic() - started),
        },
        "configs": configs,
    }
    golden_provenance.seal(
        document, pathlib.Path(harness.REPO), "vllm-metrics", pathlib.Path(args.install_report)
    )
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
