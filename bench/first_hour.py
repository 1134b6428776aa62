"""A newcomer's first hour, measured: the README's two commands on a fresh clone with empty
caches, then the suite again with the caches full.

A clone of HEAD goes into a temporary directory; kvtier's cache, the Go module and build
caches and pip's cache point into temporary directories too (never the user's), so every
binary is built and every package fetched as on a fresh machine. In the clone it runs
`make demo`, then `make test`, then (--warm) `make test` in a second fresh clone with the caches
left full; each with KVTIER_PHASE_LOG set, so that every make phase (hack/phase: each build,
the venv, lint, pytest) and every test module (tests/module_times.py) records its wall and
CPU time. Prints one table per command and, with --markdown FILE, writes them as Markdown
(docs/performance.md takes them).

    python bench/first_hour.py [--warm] [--keep] [--markdown FILE]

System packages (fio, from hack/install-system-deps) stay installed between runs: apt's state
is the machine's, not a cache this script may empty.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    command: str
    wall: float
    cpu: float
    status: int
    phases: list[dict[str, object]] = field(default_factory=list)


def fresh_env(root: Path) -> dict[str, str]:
    """The environment of a machine with nothing cached, under `root`."""
    caches = {
        "KVTIER_CACHE_DIR": root / "kvtier-cache",
        "GOMODCACHE": root / "gomodcache",
        "GOCACHE": root / "gocache",
        "PIP_CACHE_DIR": root / "pip-cache",
        "XDG_CACHE_HOME": root / "xdg-cache",
    }
    for path in caches.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVTIER_", "GO"))}
    return env | {k: str(v) for k, v in caches.items()}


def clone(into: Path, commit: str) -> Path:
    """A fresh clone at `commit`: both runs measure the commit the script started at, however
    the repository moves meanwhile."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", commit], check=True)
    return into


def run(command: str, cwd: Path, env: dict[str, str], log: Path) -> Run:
    log.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    print(f"[first-hour {time.strftime('%H:%M:%S')}] {command} in {cwd.name}", flush=True)
    status = subprocess.call(["make", command], cwd=cwd, env=env | {"KVTIER_PHASE_LOG": str(log)})
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    phases = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Run(f"make {command}", wall, cpu, status, phases)


def minutes(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return ""
    return (
        f"{int(seconds // 60)} min {seconds % 60:04.1f} s" if seconds >= 60 else f"{seconds:.1f} s"
    )


def table(title: str, result: Run) -> list[str]:
    """A Markdown table: the command, then its phases, slowest first."""
    status = "passed" if result.status == 0 else f"failed (exit {result.status})"
    lines = [
        f"#### {title}: {minutes(result.wall)} wall, {minutes(result.cpu)} CPU, {status}",
        "",
        "| phase | wall | CPU | tests |",
        "|---|---:|---:|---:|",
    ]
    for phase in sorted(result.phases, key=lambda p: -float(p["wall"])):  # type: ignore[arg-type]
        lines.append(
            f"| {phase['phase']} | {minutes(phase['wall'])} | {minutes(phase.get('cpu'))} "
            f"| {phase.get('tests', '')} |"
        )
    return [*lines, ""]


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.system()} {platform.release()}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="then `make test` with full caches")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--markdown", type=Path, help="write the tables to this file")
    args = parser.parse_args(argv)
    commit = head()
    root = Path(tempfile.mkdtemp(prefix="kvtier-first-hour-"))
    env = fresh_env(root)
    try:
        cold = clone(root / "clone", commit)
        results = [
            ("`make demo`, empty caches", run("demo", cold, env, root / "demo.jsonl")),
            ("`make test` right after it", run("test", cold, env, root / "test.jsonl")),
        ]
        if args.warm:
            warm = clone(root / "clone-warm", commit)
            results.append(
                ("`make test`, full caches, fresh clone", run("test", warm, env, root / "w.jsonl"))
            )
    finally:
        if not args.keep:
            # The Go module cache is read-only by design; let go itself empty it.
            subprocess.call(["go", "clean", "-modcache"], env=env, stderr=subprocess.DEVNULL)
            shutil.rmtree(root, ignore_errors=True)
    lines = [f"Machine: {machine()}; kvtier {commit}.", ""]
    for title, result in results:
        lines += table(title, result)
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    return 0 if all(r.status == 0 for _, r in results) else 1


def head() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
