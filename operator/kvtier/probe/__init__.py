"""The storage probe: fio at the model's block size, its parsed result, and the tier gate.

`run_probe(ProbeOptions(...))` → `FioResult` (`to_json()` is the termination message);
The tier gate (restore vs recompute) is kvtier.policy.gate: a decision, not I/O.
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

__all__ = [
    "MAX_RESULT_BYTES",
    "DirectionStats",
    "FioResult",
    "ProbeEnvironmentError",
    "ProbeError",
    "ProbeInputError",
    "ProbeOptions",
    "default_file_bytes",
    "direct_io_problem",
    "filesystem_type",
    "parse_fio_json",
    "probe_argv",
    "read_probe_result",
    "run_probe",
]
