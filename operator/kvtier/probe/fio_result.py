"""fio's JSON report → the compact probe result that `kvtier probe` prints.

The compact result is what a probe Job leaves as its termination message (the kubelet keeps at
most 4 KiB), and its top-level fields are those of the KVCacheTier status `probe` block
(`p50Seconds`, `p99Seconds`, `bandwidthBytesPerSecond`, `measuredAt`, `buffered`), taken from
the reads: restoring KV blocks is a read, and its tail latency is what lands in TTFT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kvtier.probe.errors import ProbeEnvironmentError
from kvtier.render.probe_job import parse_termination_message

# Termination messages are cut at 4096 bytes; a result must never come near that.
MAX_RESULT_BYTES = 4096
_P50 = "50.000000"
_P99 = "99.000000"


@dataclass(frozen=True)
class DirectionStats:
    """Completion latency, bandwidth and IOPS of one direction (read or write), all jobs."""

    p50_seconds: float
    p99_seconds: float
    bandwidth_bytes_per_second: int
    iops: float
    ios: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "p50Seconds": self.p50_seconds,
            "p99Seconds": self.p99_seconds,
            "bandwidthBytesPerSecond": self.bandwidth_bytes_per_second,
            "iops": self.iops,
            "ios": self.ios,
        }


@dataclass(frozen=True)
class FioResult:
    """One probe run: reads decide; writes are reported for people."""

    read: DirectionStats
    write: DirectionStats | None  # None when the run completed no writes
    measured_at: datetime
    fio_version: str
    block_bytes: int | None  # as fio ran it (None if fio did not echo the option)
    numjobs: int | None
    runtime_seconds: float
    buffered: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "p50Seconds": self.read.p50_seconds,
            "p99Seconds": self.read.p99_seconds,
            "bandwidthBytesPerSecond": self.read.bandwidth_bytes_per_second,
            "measuredAt": self.measured_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "buffered": self.buffered,
            "blockBytes": self.block_bytes,
            "numjobs": self.numjobs,
            "runtimeSeconds": self.runtime_seconds,
            "read": self.read.as_dict(),
            "write": None if self.write is None else self.write.as_dict(),
            "fio": self.fio_version,
        }

    def to_json(self) -> str:
        """Compact JSON, one line, always under MAX_RESULT_BYTES."""
        text = json.dumps(self.as_dict(), separators=(",", ":"))
        if len(text.encode()) >= MAX_RESULT_BYTES:  # only a pathological fio version string
            raise ValueError(f"probe result is {len(text)} bytes, over the termination limit")
        return text


def parse_fio_json(text: str, *, buffered: bool = False) -> FioResult:
    """Parse fio 3.x `--output-format=json --group_reporting` output.

    Raises ProbeEnvironmentError (fio ran but produced nothing usable) with a one-line reason.
    """
    report = _decode(text)
    jobs = report.get("jobs")
    if not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], dict):
        raise ProbeEnvironmentError("fio output has no jobs")
    # group_reporting folds every job into the first entry.
    job: dict[str, Any] = jobs[0]
    if job.get("error"):
        raise ProbeEnvironmentError(f"fio job failed with error {job['error']}")
    read = _direction(job, "read")
    if read is None:
        raise ProbeEnvironmentError("fio completed no reads: no restore latency to report")
    options = job.get("job options")
    if not isinstance(options, dict):
        options = {}
    timestamp = report.get("timestamp")
    if not isinstance(timestamp, int | float):
        raise ProbeEnvironmentError("fio output has no timestamp")
    return FioResult(
        read=read,
        write=_direction(job, "write"),
        measured_at=datetime.fromtimestamp(int(timestamp), UTC),
        fio_version=str(report.get("fio version", "unknown"))[:64],
        block_bytes=_int_option(options, "bs"),
        numjobs=_int_option(options, "numjobs"),
        # job_runtime sums over jobs; a direction's runtime is the group's wall time.
        runtime_seconds=_number(job["read"], "runtime", "read") / 1000,
        buffered=buffered,
    )


def _decode(text: str) -> dict[str, Any]:
    # fio may print notes on stdout before the JSON document; start at the first object.
    start = text.find("{")
    report: dict[str, Any]
    try:
        if start < 0:
            raise ValueError("no JSON object")
        report, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        first = text.strip().splitlines()[0][:200] if text.strip() else "empty output"
        raise ProbeEnvironmentError(f"fio did not print JSON: {first}") from None
    return report  # a dict: decoding started at "{"


def _direction(job: dict[str, Any], name: str) -> DirectionStats | None:
    stats = job.get(name)
    if not isinstance(stats, dict):
        raise ProbeEnvironmentError(f"fio output has no {name} statistics")
    ios = int(_number(stats, "total_ios", name))
    if ios == 0:
        return None
    clat = stats.get("clat_ns")
    percentiles = clat.get("percentile") if isinstance(clat, dict) else None
    if not isinstance(percentiles, dict):
        raise ProbeEnvironmentError(f"fio output has no {name} completion-latency percentiles")
    return DirectionStats(
        p50_seconds=_number(percentiles, _P50, f"{name} clat") / 1e9,
        p99_seconds=_number(percentiles, _P99, f"{name} clat") / 1e9,
        bandwidth_bytes_per_second=int(_number(stats, "bw_bytes", name)),
        iops=round(_number(stats, "iops", name), 2),
        ios=ios,
    )


def _number(mapping: dict[str, Any], key: str, where: str) -> float:
    value = mapping.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProbeEnvironmentError(f"fio output: {where} {key} is missing or not a number")
    return float(value)


def _int_option(options: dict[str, Any], key: str) -> int | None:
    value = options.get(key)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def read_probe_result(text: str) -> dict[str, Any]:
    """The status `probe` block from a `kvtier probe` result or from fio's own JSON report.

    Raises ProbeEnvironmentError / ProbeMessageError (both one line) on anything else.
    """
    if '"fio version"' in text:  # fio's report (people run the study's command by hand)
        return parse_termination_message(parse_fio_json(text).to_json())
    return parse_termination_message(text)
