"""Run the storage probe: check the directory, size fio's files, run fio, parse its report.

fio's files go to a fresh hidden subdirectory that is removed afterwards, so a probe never
touches the cache files a model server keeps in the same directory.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvtier.probe.errors import ProbeEnvironmentError, ProbeInputError
from kvtier.probe.fio_result import FioResult, parse_fio_json
from kvtier.settings import BUILTIN_DEFAULTS
from kvtier.sizing import fio_args, fio_block_size, human_bytes
from kvtier.sizing.fio import O_DIRECT_ALIGNMENT

DEFAULT_NUMJOBS = 16  # the study's pattern
DEFAULT_RUNTIME_SECONDS = BUILTIN_DEFAULTS.probe_runtime_seconds
# Per-job file cap: the same 1 GiB as the fio command `kvtier plan` prints.
MAX_FILE_BYTES = 1 << 30
# Files take at most this share of the free space: the rest stays for the cache itself.
FREE_SPACE_SHARE = 0.5
# Memory file systems accept O_DIRECT on recent kernels but bypass no cache: the latencies
# would be memory's, not a disk's.
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
_FIO_REFUSES_DIRECT = re.compile(r"not support (direct|o_direct)", re.IGNORECASE)
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class ProbeOptions:
    directory: str
    block_bytes: int  # rounded up to the O_DIRECT alignment before fio runs
    runtime_seconds: int = DEFAULT_RUNTIME_SECONDS
    numjobs: int = DEFAULT_NUMJOBS
    size_bytes: int | None = None  # per job; None = default_file_bytes()
    allow_buffered: bool = False


def probe_argv(
    directory: str,
    block_bytes: int,
    *,
    numjobs: int,
    runtime_seconds: int,
    size_bytes: int,
    direct: bool = True,
    fio: str = "fio",
) -> list[str]:
    """The study's fio pattern (kvtier.sizing.fio_args) with JSON output."""
    argv = fio_args(
        block_bytes, directory, jobs=numjobs, runtime_seconds=runtime_seconds, size_bytes=size_bytes
    )
    argv[0] = fio
    if not direct:
        argv[argv.index("--direct=1")] = "--direct=0"
    return [*argv, "--output-format=json"]


def default_file_bytes(free_bytes: int, numjobs: int, block_bytes: int) -> int:
    """Per-job file size: whole blocks, numjobs of them within the free-space share, capped."""
    share = int(free_bytes * FREE_SPACE_SHARE) // numjobs
    size = min(MAX_FILE_BYTES, share) // block_bytes * block_bytes
    if size < block_bytes:
        raise ProbeEnvironmentError(
            f"only {human_bytes(free_bytes)} free: {numjobs} jobs need at least one "
            f"{block_bytes:,} B block each within half of it"
        )
    return size


def filesystem_type(path: str, mountinfo: str) -> str | None:
    """The type of the file system holding `path` (absolute, resolved), from mountinfo text."""
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        # Mount points escape spaces and similar as octal (\040).
        mount = _OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4])
        fstype = line.split(" - ", 1)[1].split(" ")[0]
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= best[0]):
            best = (len(mount), fstype)
    return None if best is None else best[1]


def direct_io_problem(directory: str) -> str | None:
    """Why O_DIRECT would not measure the device under `directory`, or None when it would.

    Writes and removes one aligned 4 KiB file there.
    """
    path = os.path.realpath(directory)
    try:
        fstype = filesystem_type(path, Path("/proc/self/mountinfo").read_text())
    except OSError:  # no /proc: the write test below still catches refusals
        fstype = None
    if fstype in MEMORY_FILESYSTEMS:
        return f"it is on {fstype}, where O_DIRECT bypasses no cache (memory, not a disk)"
    probe_file = os.path.join(path, f".kvtier-odirect-check-{os.getpid()}")
    try:
        fd = os.open(probe_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
        try:
            with mmap.mmap(-1, O_DIRECT_ALIGNMENT) as aligned:  # page-aligned, as O_DIRECT needs
                os.write(fd, aligned)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return "its file system refuses O_DIRECT"
        raise ProbeEnvironmentError(f"{directory} is not writable: {exc.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe_file)
    return None


def run_probe(options: ProbeOptions) -> FioResult:
    """Run fio with the study's pattern in `options.directory` and parse its report."""
    _check(options)
    fio = shutil.which("fio")
    if fio is None:
        raise ProbeEnvironmentError(
            "fio not found on PATH: install it (apt-get install fio / dnf install fio)"
        )
    directory = options.directory
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.exists(directory) else "does not exist"
        raise ProbeEnvironmentError(f"{directory} {what}")
    try:
        workdir = tempfile.mkdtemp(prefix=".kvtier-probe-", dir=directory)
    except OSError as exc:
        raise ProbeEnvironmentError(f"{directory} is not writable: {exc.strerror}") from None
    try:
        return _run_in(workdir, fio, options)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _check(options: ProbeOptions) -> None:
    for name, value in (
        ("block size", options.block_bytes),
        ("runtime", options.runtime_seconds),
        ("numjobs", options.numjobs),
        ("size", options.size_bytes),
    ):
        if value is not None and value <= 0:
            raise ProbeInputError(f"{name} must be greater than zero, got {value}")


def _run_in(workdir: str, fio: str, options: ProbeOptions) -> FioResult:
    bs = fio_block_size(options.block_bytes)
    stat = os.statvfs(workdir)
    free = stat.f_bavail * stat.f_frsize
    if options.size_bytes is None:
        size = default_file_bytes(free, options.numjobs, bs)
    else:
        size = max(-(-options.size_bytes // bs) * bs, bs)  # whole blocks, as fio_args does
        if size * options.numjobs > free:
            raise ProbeInputError(
                f"{options.numjobs} jobs × {human_bytes(size)} exceed the "
                f"{human_bytes(free)} free in {options.directory}"
            )
    problem = direct_io_problem(workdir)
    if problem is not None and not options.allow_buffered:
        raise ProbeEnvironmentError(
            f"{options.directory}: {problem}; pass --allow-buffered to probe with buffered I/O"
        )

    def run(direct: bool) -> subprocess.CompletedProcess[str]:
        argv = probe_argv(
            workdir,
            bs,
            numjobs=options.numjobs,
            runtime_seconds=options.runtime_seconds,
            size_bytes=size,
            direct=direct,
            fio=fio,
        )
        return subprocess.run(argv, capture_output=True, text=True, check=False)

    direct = problem is None
    done = run(direct)
    # fio has the last word on O_DIRECT: some file systems only refuse it on real I/O.
    if done.returncode != 0 and direct and _FIO_REFUSES_DIRECT.search(done.stderr):
        if not options.allow_buffered:
            raise ProbeEnvironmentError(
                f"{options.directory}: its file system refuses O_DIRECT; "
                "pass --allow-buffered to probe with buffered I/O"
            )
        direct = False
        done = run(direct)
    if done.returncode != 0:
        raise ProbeEnvironmentError(f"fio failed (exit {done.returncode}): {_summary(done)}")
    return parse_fio_json(done.stdout, buffered=not direct)


def _summary(done: subprocess.CompletedProcess[str]) -> str:
    """fio's complaints as one line."""
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    text = "; ".join(dict.fromkeys(lines)) or "no output"
    return text if len(text) <= 300 else text[:297] + "..."
