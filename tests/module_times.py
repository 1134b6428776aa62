"""A pytest plugin that prints the slowest test modules at the end of a run: each module's
wall time is the sum of its tests' setup, call and teardown phases (a session fixture's
start is counted in the first module that asks for it), so the summary shows where the
suite's time goes without a separate profiling run. With KVTIER_PHASE_LOG set (hack/phase,
bench/first_hour.py), every module's time is appended there as a JSON line too."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

SHOWN = 15


class ModuleTimes:
    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.tests: defaultdict[str, int] = defaultdict(int)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        self.seconds[module] += report.duration
        if report.when == "call":
            self.tests[module] += 1

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        total = sum(self.seconds.values())
        slowest = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)[:SHOWN]
        terminalreporter.section(f"the {len(slowest)} slowest of {len(self.seconds)} test modules")
        for module, seconds in slowest:
            share = 100 * seconds / total if total else 0.0
            terminalreporter.write_line(
                f"{seconds:8.1f} s {share:5.1f} % {self.tests[module]:5d} tests  {module}"
            )
        terminalreporter.write_line(f"{total:8.1f} s in all")
        if log := os.environ.get("KVTIER_PHASE_LOG"):
            with open(log, "a", encoding="utf-8") as out:
                for module, seconds in self.seconds.items():
                    line = {"phase": f"pytest {module}", "wall": round(seconds, 1)}
                    out.write(json.dumps({**line, "tests": self.tests[module]}) + "\n")
