"""A pytest plugin that prints the slowest test modules at the end of a run: each module's
wall time is the sum of its tests' setup, call and teardown phases (a session fixture's
start is counted in the first module that asks for it), so the summary shows where the
suite's time goes without a separate profiling run. With KVTIER_PHASE_LOG set (hack/phase,
bench/first_hour.py), every module's time is appended there as a JSON line too.

Each module's CPU time is counted too, where its tests run (the pytest process, or the
xdist worker): the CPU of that process and of every process under it (the control planes,
operators and controllers a test starts) from the module's first setup to its last
teardown. A worker runs a module's tests one after the other and nothing else meanwhile, so
that is the module's own. The worker sends it to the controller on the report of the
module's last teardown."""

from __future__ import annotations

import json
import os
import resource
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

SHOWN = 15
CPU_KEY = "kvtier_module_cpu"
_TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """Live child processes of `pid` (of any of its threads)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            listed = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in listed.split())
    return found


def tree_cpu(pid: int | None = None) -> float:
    """CPU seconds of this process (every thread), of its children it has reaped, and of
    every live process under it with the children those have reaped. Differences of two
    readings count a process reaped in between once: its CPU moves from live to reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    pending = _children(os.getpid() if pid is None else pid)
    while pending:
        child = pending.pop()
        try:
            stat = Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile: its parent's reaped CPU has it
            continue
        # utime, stime, cutime, cstime (proc(5) fields 14-17)
        total += sum(int(v) for v in stat[11:15]) / _TICKS
        pending.extend(_children(child))
    return total


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class ModuleCPU:
    """Where the tests run: measures each module's CPU and puts it on the report of the
    module's last teardown (a report's user_properties reach the xdist controller)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.next_module: str | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        module = _module(item.nodeid)
        if module not in self.started:
            self.started[module] = tree_cpu()
        self.next_module = _module(nextitem.nodeid) if nextitem is not None else None
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        module = _module(item.nodeid)
        if call.when == "teardown" and self.next_module != module and module in self.started:
            report.user_properties.append((CPU_KEY, tree_cpu() - self.started.pop(module)))
        return report


def register(config: pytest.Config) -> None:
    """Each module's CPU is measured where its tests run; under pytest-xdist the controller
    hears every worker's reports and alone sums them up (a worker's summary would log its
    modules a second time)."""
    config.pluginmanager.register(ModuleCPU(), "kvtier-module-cpu")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(ModuleTimes(), "kvtier-module-times")


class ModuleTimes:
    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.cpu: defaultdict[str, float] = defaultdict(float)
        self.tests: defaultdict[str, int] = defaultdict(int)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = _module(report.nodeid)
        self.seconds[module] += report.duration
        if report.when == "call":
            self.tests[module] += 1
        for key, value in report.user_properties:  # xdist turns the tuples into lists
            if key == CPU_KEY:
                self.cpu[module] += float(value)  # type: ignore[arg-type]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        total = sum(self.seconds.values())
        slowest = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)[:SHOWN]
        terminalreporter.section(f"the {len(slowest)} slowest of {len(self.seconds)} test modules")
        for module, seconds in slowest:
            share = 100 * seconds / total if total else 0.0
            terminalreporter.write_line(
                f"{seconds:8.1f} s {share:5.1f} % {self.cpu[module]:8.1f} s CPU "
                f"{self.tests[module]:5d} tests  {module}"
            )
        terminalreporter.write_line(f"{total:8.1f} s in all, {sum(self.cpu.values()):.1f} s CPU")
        if log := os.environ.get("KVTIER_PHASE_LOG"):
            with open(log, "a", encoding="utf-8") as out:
                for module, seconds in self.seconds.items():
                    line = {
                        "phase": f"pytest {module}",
                        "wall": round(seconds, 1),
                        "cpu": round(self.cpu[module], 1),
                    }
                    out.write(json.dumps({**line, "tests": self.tests[module]}) + "\n")
