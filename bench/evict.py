"""Eviction benchmark: one `kvtier evict --once` pass against `find DIR -printf ...`.

Builds a tree of N block files in vLLM's fs layout (two ranks of one model digest,
`<model>_<digest>_r<rank>/<hhh>/<hh>_g0/<hash>.bin`; sparse 5 MiB files, Llama 3.1 70B's
16-token block, so 500,000 of them take only their inodes and directories), last used at
random over the past day, and a --capacity that the tree fills to 86 %. Then, on the same
tree in the same run: `find DIR -printf '%A@ %s %p\\n'` (a warm-up, then the median of 3),
one eviction pass (down to the 70 % low watermark: it lists, sorts and deletes), and one more
pass with nothing to delete (the steady state: what runs every --interval). Wall time and peak
RSS (VmHWM) of each process are measured from
this script.

    python bench/evict.py [--files 500000] [--dir DIR] [--max-time-ratio 2] [--max-rss-mib 200]

Prints `ratio ...` lines and how often a pass runs (and walks the tree) at the default
settings; exits 1 when a goal is missed (0 disables a check).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kvtier.evict.run import DEFAULT_INTERVAL_SECONDS, FULL_WALK_SECONDS

BLOCK_BYTES = 5 << 20  # Llama 3.1 70B, 16 tokens of 327,680 B
MODEL_DIR = "meta-llama_Llama-3.1-70B-Instruct_5d3c2a1b0f9e"
RANKS = 2
FILL = 0.86  # of --capacity: just past the default high watermark
DAY = 86400.0


def kvtier_command() -> list[str]:
    """The installed `kvtier` script beside this interpreter, else `python -m kvtier`."""
    script = Path(sys.executable).parent / "kvtier"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "kvtier"]


def build_tree(root: Path, files: int, seed: int = 1) -> int:
    """`files` sparse block files under root, as vLLM lays them out; returns their bytes."""
    rnd = random.Random(seed)
    now = time.time()
    (root / MODEL_DIR).mkdir(parents=True, exist_ok=True)
    (root / MODEL_DIR / "config.json").write_text("{}\n")
    made: set[str] = set()
    for i in range(files):
        h = hashlib.sha256((i // RANKS).to_bytes(8, "big")).hexdigest()
        leaf = f"{root}/{MODEL_DIR}_r{i % RANKS}/{h[:3]}/{h[3:5]}_g0"
        if leaf not in made:
            os.makedirs(leaf, exist_ok=True)
            made.add(leaf)
        fd = os.open(f"{leaf}/{h}.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.ftruncate(fd, BLOCK_BYTES)
            written = now - 3600 - rnd.random() * DAY
            read = written + rnd.random() * 3600 if rnd.random() < 0.5 else written
            os.utime(fd, (read, written))
        finally:
            os.close(fd)
    return files * BLOCK_BYTES


def run(argv: Sequence[str], capture: bool = False) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MiB, stdout) of one process; stdout goes to
    /dev/null unless captured (find prints a line per file).

    Peak RSS is VmHWM, read while the process runs: it counts only what the program itself
    touched since exec, where wait4's ru_maxrss would also count the forking parent's pages.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out if capture else subprocess.DEVNULL, stderr=err)
        peak_kib = 0
        while True:
            peak_kib = max(peak_kib, _vm_hwm_kib(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.002)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code != 0:
            raise SystemExit(f"{argv[0]} failed ({code}): {err.read().strip()}")
        return wall, usage.ru_utime + usage.ru_stime, peak_kib / 1024, out.read()


def _vm_hwm_kib(pid: int) -> int:
    """The process's peak resident set since exec (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=500_000, help="block files (default 500000)")
    parser.add_argument("--dir", type=Path, help="build the tree here (default: a temporary dir)")
    parser.add_argument("--max-time-ratio", type=float, default=2.0, help="goal; 0: no check")
    parser.add_argument("--max-rss-mib", type=float, default=200.0, help="goal; 0: no check")
    args = parser.parse_args(argv)
    top = Path(tempfile.mkdtemp(prefix="kvtier-evict-bench-", dir=args.dir))
    try:
        return measure(top / "tier", max(1, args.files), args.max_time_ratio, args.max_rss_mib)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def measure(tier: Path, files: int, max_time_ratio: float, max_rss_mib: float) -> int:
    start = time.perf_counter()
    total = build_tree(tier, files)
    capacity = int(total / FILL)
    print(
        f"{files:,} files in {time.perf_counter() - start:.0f} s; --capacity {capacity:,} B "
        f"({FILL:.0%} full); Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    find = ["find", str(tier), "-printf", r"%A@ %s %p\n"]
    run(find)  # warm-up: directories and inodes in the cache, for both
    finds = [run(find) for _ in range(3)]
    find_wall = statistics.median(r[0] for r in finds)
    find_rss = max(r[2] for r in finds)
    evict = [*kvtier_command(), "evict", "--dir", str(tier), "--once", "-o", "json"]
    evict += ["--capacity", str(capacity)]
    wall, cpu, rss, out = run(evict, capture=True)
    summary = json.loads(out)
    steady_wall, steady_cpu, steady_rss, steady_out = run(evict, capture=True)
    steady = json.loads(steady_out)
    print(
        f"ratio eviction pass time: {wall / find_wall:.2f}x find ({wall:.2f} s vs "
        f"{find_wall:.2f} s, median of 3; CPU {cpu:.2f} s); deleted "
        f"{summary['evictedFiles']:,} files, {summary['usageRatio']:.1%} -> "
        f"{summary['usageRatioAfter']:.1%}"
    )
    print(
        f"ratio eviction pass peak RSS: {rss / find_rss:.1f}x find ({rss:.0f} MiB vs "
        f"{find_rss:.1f} MiB)"
    )
    print(
        f"ratio steady pass time: {steady_wall / find_wall:.2f}x find ({steady_wall:.2f} s, "
        f"CPU {steady_cpu:.2f} s, {steady_rss:.0f} MiB; deleted {steady['evictedFiles']})"
    )
    print(
        f"interval: at the default --interval {DEFAULT_INTERVAL_SECONDS:g} s a pass runs "
        f"{3600 / DEFAULT_INTERVAL_SECONDS:g} times an hour; it walks the tree every "
        f"{FULL_WALK_SECONDS:g} s, and every pass once the tier is halfway to the high "
        f"watermark; a walk of this tree (the steady pass) takes "
        f"{steady_cpu / FULL_WALK_SECONDS:.1%} of one core every {FULL_WALK_SECONDS:g} s, "
        f"{steady_cpu / DEFAULT_INTERVAL_SECONDS:.1%} every {DEFAULT_INTERVAL_SECONDS:g} s "
        f"({steady_wall / DEFAULT_INTERVAL_SECONDS:.1%} of the interval's wall time)"
    )
    missed = []
    if max_time_ratio and wall / find_wall > max_time_ratio:
        missed.append(f"time {wall / find_wall:.2f}x > {max_time_ratio:g}x")
    if max_rss_mib and rss > max_rss_mib:
        missed.append(f"peak RSS {rss:.0f} MiB > {max_rss_mib:g} MiB")
    if missed:
        print(f"goal missed: {'; '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
