"""The storage probe: fio at the model's block size, its parsed result, and the tier gate.

`run_probe(ProbeOptions(...))` → `FioResult` (`to_json()` is the termination message);
`gate_tier(...)` → `TierVerdict` (restore vs recompute, object-store tail ceiling).
"""

from kvtier.probe.errors import ProbeEnvironmentError, ProbeError, ProbeInputError
from kvtier.probe.fio_result import (
    MAX_RESULT_BYTES,
    DirectionStats,
    FioResult,
    parse_fio_json,
    read_probe_result,
)
from kvtier.probe.fio_runner import (
    ProbeOptions,
    default_file_bytes,
    direct_io_problem,
    filesystem_type,
    probe_argv,
    run_probe,
)
from kvtier.probe.gate import TierVerdict, gate_tier

__all__ = [
    "MAX_RESULT_BYTES",
    "DirectionStats",
    "FioResult",
    "ProbeEnvironmentError",
    "ProbeError",
    "ProbeInputError",
    "ProbeOptions",
    "TierVerdict",
    "default_file_bytes",
    "direct_io_problem",
    "filesystem_type",
    "gate_tier",
    "parse_fio_json",
    "probe_argv",
    "read_probe_result",
    "run_probe",
]
