"""Warnings about inputs that are valid but probably not what the user meant.

`kvtier plan` prints them beside the plan's own warnings: a context longer than the model
takes, a bandwidth or latency that looks like a unit mistake (``cephfs=205`` is 205 B/s, not
205 MB/s), sizes beyond any machine. Pure: no I/O.
"""

from __future__ import annotations

from kvtier.sizing.plan import SizingInput
from kvtier.sizing.units import human_bytes

# No disk or network a KV tier sits on moves less than this; below it is a unit slip.
MIN_PLAUSIBLE_BANDWIDTH = 1_000_000  # 1 MB/s
# A p99 of whole seconds per block read is a unit slip (ms given as s) or a broken tier.
MAX_PLAUSIBLE_P99_SECONDS = 10.0
# Beyond any serving model's context today (the largest take 10M tokens).
MAX_PLAUSIBLE_CONTEXT_TOKENS = 16 * 2**20
# More memory than any single server has (the largest take 32 TiB).
MAX_PLAUSIBLE_MEMORY_BYTES = 64 * 2**40
MAX_PLAUSIBLE_SESSIONS = 1_000_000
MAX_PLAUSIBLE_TTFT_SECONDS = 3600.0


def input_warnings(inp: SizingInput) -> list[str]:
    """One line per implausible input, naming the figure and what was likely meant."""
    warnings: list[str] = []
    context = inp.average_context_tokens
    longest = inp.geometry.max_position_embeddings
    if longest is not None and context > longest:
        warnings.append(
            f"--context {context:,} tokens exceeds {inp.geometry.name}'s "
            f"max_position_embeddings {longest:,}: no request can be that long"
        )
    elif context > MAX_PLAUSIBLE_CONTEXT_TOKENS:
        warnings.append(
            f"--context {context:,} tokens is longer than any serving model takes "
            f"({MAX_PLAUSIBLE_CONTEXT_TOKENS:,})"
        )
    if inp.concurrent_sessions > MAX_PLAUSIBLE_SESSIONS:
        warnings.append(f"--sessions {inp.concurrent_sessions:,} is beyond any serving fleet")
    for flag, size in (
        ("--cpu", inp.cpu_bytes),
        ("--node-memory", inp.node_memory_bytes),
        ("--gpu-memory", inp.gpu_memory_bytes),
        ("--headroom", inp.headroom_bytes),
    ):
        if size is not None and size > MAX_PLAUSIBLE_MEMORY_BYTES:
            warnings.append(
                f"{flag} {human_bytes(size)} is more memory than any server has "
                f"({human_bytes(MAX_PLAUSIBLE_MEMORY_BYTES)}); check the unit"
            )
    for tier, rate in sorted(inp.tier_bandwidth_bytes_per_second.items()):
        if rate < MIN_PLAUSIBLE_BANDWIDTH:
            warnings.append(
                f"--tier-bandwidth {tier}={rate:g} is {rate:g} B/s, slower than any disk; "
                f"a plain number is bytes per second: did you mean {rate:g}MB/s?"
            )
    for tier, p99 in sorted(inp.tier_p99_seconds.items()):
        if p99 > MAX_PLAUSIBLE_P99_SECONDS:
            warnings.append(
                f"--tier-p99 {tier}={p99:g} is {p99:g} s per block read; the value is in "
                f"seconds: did you mean {p99 / 1000:g} ({p99:g} ms)?"
            )
    ttft = inp.baseline_ttft_seconds
    if ttft is not None and ttft > MAX_PLAUSIBLE_TTFT_SECONDS:
        warnings.append(f"--ttft {ttft:g} s is over an hour; the value is in seconds")
    return warnings
