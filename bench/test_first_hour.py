"""bench/first_hour.py's parts that need no cold build: the caches it empties are its own,
the phases hack/phase records, and the table it prints from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.first_hour import Run, clone, fresh_env, head, table  # noqa: E402


def test_every_cache_is_a_fresh_directory_of_the_run(tmp_path: Path) -> None:
    env = fresh_env(tmp_path)
    for name in ("KVTIER_CACHE_DIR", "GOMODCACHE", "GOCACHE", "PIP_CACHE_DIR", "XDG_CACHE_HOME"):
        path = Path(env[name])
        assert path.is_dir() and tmp_path in path.parents and not any(path.iterdir())
    assert "KVTIER_PHASE_LOG" not in env and "GOFLAGS" not in env


def test_a_phase_records_its_wall_cpu_and_status(tmp_path: Path) -> None:
    log = tmp_path / "phases.jsonl"
    env = {**os.environ, "KVTIER_PHASE_LOG": str(log)}
    burn = "python3 -c 'sum(range(3_000_000))'; sleep 0.3; exit 4"
    code = subprocess.call([str(REPO / "hack" / "phase"), "burn", "--", "sh", "-c", burn], env=env)
    assert code == 4
    [line] = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["phase"] == "burn" and line["status"] == 4
    assert line["wall"] >= 0.3 and line["cpu"] > 0


def test_a_phases_cpu_counts_the_processes_its_command_left_behind(tmp_path: Path) -> None:
    """A process whose parent exits without waiting for it still counts: hack/phase adopts
    it and waits for it."""
    log = tmp_path / "phases.jsonl"
    env = {**os.environ, "KVTIER_PHASE_LOG": str(log)}
    orphan = "python3 -c 'import time\nwhile time.process_time() < 0.6: pass' & exit 0"
    code = subprocess.call(
        [str(REPO / "hack" / "phase"), "left", "--", "sh", "-c", orphan], env=env
    )
    assert code == 0
    [line] = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["cpu"] >= 0.5, line


def test_the_table_lists_phases_slowest_first() -> None:
    run = Run(
        "make test",
        125.0,
        80.0,
        0,
        [
            {"phase": "mypy", "wall": 20.0, "cpu": 19.0, "status": 0},
            {"phase": "pytest tests/e2e/test_a.py", "wall": 95.5, "tests": 7},
        ],
    )
    lines = table("`make test`", run)
    assert lines[0] == "#### `make test`: 2 min 05.0 s wall, 1 min 20.0 s CPU, passed"
    assert lines[4] == "| pytest tests/e2e/test_a.py | 1 min 35.5 s |  | 7 |"
    assert lines[5] == "| mypy | 20.0 s | 19.0 s |  |"


def test_a_clone_is_at_the_commit_the_run_started_at(tmp_path: Path) -> None:
    """Both runs measure one commit, whatever lands on the repository meanwhile."""
    first = subprocess.run(
        ["git", "rev-list", "--max-parents=0", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.split()[0]
    into = clone(tmp_path / "clone", first[:12])
    at = subprocess.run(["git", "rev-parse", "HEAD"], cwd=into, capture_output=True, text=True)
    assert at.stdout.strip() == first and not first.startswith(head())
