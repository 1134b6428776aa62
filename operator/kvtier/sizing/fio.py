"""The fio probe that measures a disk tier at the model's block size.

p99 latency matters, not p50: it lands in TTFT. A sequential 1 MB read shows only the
bandwidth roof, so the probe does random 75/25 read/write at the server-wide KV block size.
"""

from __future__ import annotations

import shlex

# O_DIRECT needs I/O sizes aligned to the logical block size; 4 KiB covers common devices.
O_DIRECT_ALIGNMENT = 4096


def fio_block_size(block_bytes: int, alignment: int = O_DIRECT_ALIGNMENT) -> int:
    """The block size rounded up to the O_DIRECT alignment (unchanged when already aligned)."""
    return -(-block_bytes // alignment) * alignment


def fio_args(
    block_bytes: int,
    directory: str,
    *,
    jobs: int = 16,
    runtime_seconds: int = 60,
    size_bytes: int = 1 << 30,
) -> list[str]:
    """fio arguments for the probe; each job's file is at least one block."""
    bs = fio_block_size(block_bytes)
    size = max(-(-size_bytes // bs) * bs, bs)
    return [
        "fio",
        "--name=kvtier-probe",
        f"--directory={directory}",
        "--rw=randrw",
        "--rwmixread=75",
        f"--bs={bs}",
        "--iodepth=1",
        f"--numjobs={jobs}",
        "--direct=1",
        "--ioengine=libaio",
        f"--runtime={runtime_seconds}",
        "--time_based",
        f"--size={size}",
        "--group_reporting",
    ]


def fio_command(block_bytes: int, directory: str, **options: int) -> str:
    """The probe as one shell-quoted command line."""
    return shlex.join(fio_args(block_bytes, directory, **options))
