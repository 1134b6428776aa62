"""Probe errors: each carries the `kvtier probe` exit code and reads as one line."""

from __future__ import annotations

BAD_INPUT = 2
ENVIRONMENT_FAILURE = 3


class ProbeError(Exception):
    """A probe problem to report in one line, without a traceback."""

    exit_code = ENVIRONMENT_FAILURE


class ProbeInputError(ProbeError):
    """The caller asked for something impossible (bad flags, a file larger than the disk)."""

    exit_code = BAD_INPUT


class ProbeEnvironmentError(ProbeError):
    """fio or the directory failed: fio missing, not writable, O_DIRECT refused, fio error."""
