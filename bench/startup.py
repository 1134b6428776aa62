"""Start-up benchmark: `kvtier --help` and `kvtier plan ... -o json` against `python -c pass`.

Each command runs N times in a fresh subprocess, the commands interleaved round-robin so that
a busy moment of the machine hits all of them alike; the median wall time of each is divided
by the median of `python -c pass` from the same interpreter in the same run. The goal is at
most 3× (issue J): the CLI imports a subcommand's module only when that subcommand runs, and
the sizing package parses quantities without the Kubernetes client.

    python bench/startup.py [--runs 20] [--max-ratio 3]

Prints one line per command, `ratio <name>: <x>x ...` (median wall time, and the ratio of
CPU time, which a busy machine disturbs less); exits 1 when a wall-time ratio exceeds
--max-ratio (0 disables the check). Bytecode is cached as in an installed package. Find
what is slow with `python -X importtime -m kvtier ...`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PLAN_ARGS = ("plan", "--model", "llama-3.1-70b", "--tp", "8", "--context", "128Ki", "-o", "json")


def kvtier_command() -> list[str]:
    """The installed `kvtier` script beside this interpreter, else `python -m kvtier`."""
    script = Path(sys.executable).parent / "kvtier"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "kvtier"]


def commands() -> dict[str, list[str]]:
    kvtier = kvtier_command()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "kvtier --help": [*kvtier, "--help"],
        "kvtier plan -o json": [*kvtier, *PLAN_ARGS],
    }


# Bytecode is cached as in an installed package (pip compiles it); the warm-up run writes it.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def time_once(argv: Sequence[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run; CPU time is what a busy machine disturbs less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=_ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(cmds: dict[str, list[str]], runs: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds per command over `runs` interleaved runs, after a warm-up."""
    for argv in cmds.values():
        time_once(argv)  # page cache and bytecode
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            wall, cpu = time_once(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in cmds}


def report(
    medians: dict[str, tuple[float, float]], baseline: str = "python -c pass"
) -> list[tuple[str, float]]:
    """(line, wall-time ratio) for each command but the baseline."""
    floor_wall, floor_cpu = medians[baseline]
    lines = []
    for name, (wall, cpu) in medians.items():
        if name == baseline:
            continue
        ratio = wall / floor_wall
        cpu_ratio = cpu / floor_cpu if floor_cpu > 0 else float("nan")
        lines.append(
            (
                f"ratio {name}: {ratio:.2f}x {baseline} "
                f"({wall * 1000:.1f} ms vs {floor_wall * 1000:.1f} ms wall, median; "
                f"CPU time {cpu_ratio:.2f}x: {cpu * 1000:.1f} ms vs {floor_cpu * 1000:.1f} ms)",
                ratio,
            )
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20, help="runs per command (default 20)")
    parser.add_argument("--max-ratio", type=float, default=3.0, help="goal; 0: no check")
    args = parser.parse_args(argv)
    medians = measure(commands(), max(1, args.runs))
    print(f"{args.runs} runs each, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    worst = 0.0
    for line, ratio in report(medians):
        print(line)
        worst = max(worst, ratio)
    if args.max_ratio and worst > args.max_ratio:
        print(f"goal missed: {worst:.2f}x > {args.max_ratio:g}x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
