"""Evictor errors: each carries the `kvtier evict` exit code and reads as one line."""

from __future__ import annotations

BAD_INPUT = 2
ENVIRONMENT_FAILURE = 3


class EvictError(Exception):
    """An eviction problem to report in one line, without a traceback."""

    exit_code = ENVIRONMENT_FAILURE


class BadDirectory(EvictError):
    """A tier directory the evictor may not touch: missing, not a directory, not writable,
    `/`, or outside every allowed root."""

    exit_code = BAD_INPUT
