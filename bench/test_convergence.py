"""The convergence benchmark: its pure helpers, and one shortened Apply run on a local control
plane whose writes per tier are held to floor (c)'s (run: .venv/bin/pytest
bench/test_convergence.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.convergence import (
    LAYERS,
    Phase,
    Run,
    count_writes,
    floor_writes_for,
    gap_text,
    is_ready,
    median_run,
    parse_audit,
    per_tier,
    profile_layers,
    ratio,
    run_one,
    summarize_profile,
    tier_body,
    with_section,
)

USER = "system:serviceaccount:kvtier-system:kvtier-operator"


def _line(verb: str, resource: str, at: str, user: str = USER, sub: str = "") -> str:
    ref = {"resource": resource, "namespace": "ns", **({"subresource": sub} if sub else {})}
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "stageTimestamp": at,
        }
    )


def test_audit_counts_writes_of_one_user_in_a_window() -> None:
    entries = parse_audit(
        [
            _line("patch", "kvcachetiers", "2026-01-01T00:00:01.5Z", sub="status"),
            _line("create", "events", "2026-01-01T00:00:02Z"),
            _line("create", "events", "2026-01-01T00:00:09Z"),
            _line("patch", "kvcachetiers", "2026-01-01T00:00:02Z", user="admin"),
            _line("get", "kvcachetiers", "2026-01-01T00:00:02Z"),
            "not json",
        ]
    )
    start = entries[0].at - 1
    counts = count_writes(entries, USER, start, start + 5)
    assert counts == {("patch", "kvcachetiers/status"): 1, ("create", "events"): 1}
    assert per_tier(counts, 2) == "create events 0.50, patch kvcachetiers/status 0.50"


def test_floor_writes_mirror_the_operator_result() -> None:
    tier = {
        "metadata": {"name": "tier-0", "finalizers": ["kvcache.io/cleanup"]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "plan": {
                "actions": [
                    {
                        "action": "Apply",
                        "kind": "StorageClass",
                        "body": {"metadata": {"name": "sc"}},
                    },
                    {
                        "action": "Apply",
                        "kind": "PersistentVolume",
                        "body": {"metadata": {"name": "pv"}},
                    },
                    {
                        "action": "Apply",
                        "kind": "LLMInferenceService",
                        "body": {"metadata": {"name": "m", "namespace": "op"}},
                    },
                ]
            },
        },
    }
    writes = floor_writes_for(tier, "floor", "Apply")
    assert [w["op"] for w in writes] == ["apply", "apply", "apply", "status"]
    assert writes[0]["body"]["metadata"]["finalizers"] == ["kvcache.io/cleanup"]
    assert writes[1]["body"]["metadata"]["name"] == "floor-pv"
    assert writes[2]["body"]["metadata"]["namespace"] == "floor"
    assert is_ready({"status": writes[3]["status"]})
    assert [w["op"] for w in floor_writes_for(tier, "floor", "Plan")] == ["status"]
    event = {
        "metadata": {"name": "tier-0.1", "namespace": "op", "uid": "e"},
        "involvedObject": {"kind": "KVCacheTier", "name": "tier-0", "namespace": "op", "uid": "u"},
        "reason": "Applied",
        "message": "3 write(s)",
        "eventTime": None,
    }
    copied = floor_writes_for(tier, "floor", "Apply", [event])[-1]
    assert copied["op"] == "create"
    assert copied["body"]["apiVersion"] == "v1" and copied["body"]["kind"] == "Event"
    assert copied["body"]["metadata"] == {"generateName": "tier-0.", "namespace": "floor"}
    assert copied["body"]["involvedObject"] == {
        "kind": "KVCacheTier",
        "name": "tier-0",
        "namespace": "floor",
    }
    assert copied["body"]["reason"] == "Applied" and "eventTime" not in copied["body"]


def test_workload_and_ratio() -> None:
    assert tier_body(0, "Apply")["spec"]["disk"]["type"] == "NVMe"
    assert tier_body(1, "Plan")["spec"]["targetRef"]["kind"] == "InferenceService"
    assert ratio(3.0, 2.0) == "1.50×" and ratio(1.0, 0.0) == "n/a"


def test_profile_summary(tmp_path: Path) -> None:
    stacks = tmp_path / "p.collapsed"
    stacks.write_text("main (a.py:1);work (a.py:5) 3\nmain (a.py:1) 1\n")
    text = summarize_profile(stacks)
    assert "4 samples" in text and "75.0%  work (a.py:5)" in text


def _gap_run(controller_seconds: float) -> Run:
    floor = Phase(10.0, Counter({("patch", "x"): 1000}), cpu_seconds=2.0, server_cpu_seconds=9.5)
    writes = Counter({("patch", "x"): 1000, ("create", "events"): 250})
    controller = Phase(controller_seconds, writes, cpu_seconds=3.0, server_cpu_seconds=10.0)
    operator = Phase(16.0, writes + Counter({("update", "leases"): 2}), cpu_seconds=10.0)
    operator.server_cpu_seconds = 11.5
    return Run("Apply", 250, operator, floor, Phase(), controller, 0, ratios=(1.5, 1.6, 1.9))


def test_gap_text_measures_kvtier_against_the_controller_floor() -> None:
    layers = [(LAYERS[0][0], 0.30), (LAYERS[2][0], 0.20), (LAYERS[1][0], 0.05), ("other", 0.45)]
    text = gap_text([_gap_run(11.0)], cores=2, layers=layers)
    assert "kvtier 16.0 s, floor (a) 10.0 s (1.60×; every run: 1.50×, 1.60×, 1.90×)" in text
    assert "1.2× is 12.0 s" in text
    assert "40.0 ms per tier against floor (a)'s 8.0 (5.00×; goal 2.0×)" in text
    assert "the leader-election Lease left out: 5.00 against floor (c)'s 5.00" in text
    assert "1.00 per tier, copies of kvtier's" in text  # 250 Events over 250 tiers
    assert "It took 11.0 s, 1.10× of floor (a)" in text
    assert "1.2× leaves 1.0 s beyond floor (c), 2.0 CPU-s on 2 cores" in text
    assert "kvtier took 5.0 s more than floor (c) (1.45×)" in text
    assert "used 10.0 CPU-s, floor (c) 3.0 (+7.0); kube-apiserver and etcd 11.5 and 10.0" in text
    # Handling (30 % of 10 CPU-s) is beyond what floor (c) pays; receiving it pays too.
    assert "kvtier's decisions, 20%, about 2.0 CPU-s" in text
    assert "handling watch events, 30%, about 3.0" in text
    assert "together 5.0 CPU-s, are more than the 2.0 CPU-s" in text


def test_gap_text_says_when_the_controller_floor_is_beyond_the_goal() -> None:
    text = gap_text([_gap_run(13.5)], cores=2)
    assert "the goal is below the controller floor itself" in text


def test_profile_layers_put_each_sample_in_its_first_layer(tmp_path: Path) -> None:
    collapsed = tmp_path / "operator.collapsed"
    collapsed.write_text(
        "main;_dispatch (kvtier/kube/informer.py:1);on_tier (kvtier/controller/watches.py:9) 3\n"
        "main;reconcile;decide (kvtier/policy/decide.py:9) 5\n"
        "main;select (selectors.py:1) 2\n"
        "run;_watch (kvtier/kube/informer.py:4);stream (kvtier/kube/rest.py:9) 2\n"
    )
    assert profile_layers(collapsed) == [
        ("kvtier: deciding (sizing, rendering, conditions)", 5 / 12),
        ("kvtier: handling watch events (cache, queue)", 3 / 12),
        ("other", 2 / 12),
        ("kvtier: receiving watch events (informers: HTTP stream, JSON)", 2 / 12),
    ]


def test_gap_text_says_when_the_goal_is_met() -> None:
    floor = Phase(seconds=10.0, writes=Counter({("patch", "x"): 1000}))
    operator = Phase(seconds=12.0, writes=Counter({("patch", "x"): 1000, ("create", "events"): 5}))
    controller = Phase(seconds=11.0, writes=operator.writes, cpu_seconds=3.0)
    operator.cpu_seconds = 4.5
    text = gap_text([Run("Apply", 10, operator, floor, Phase(), controller, 0)])
    assert "Within the 1.2× goal" in text
    assert "took 11.0 s: kvtier 1.09× of it, with 4.5 CPU-s against its 3.0" in text
    assert "What the profile showed" in text


def test_the_median_repetition_is_reported_whole_with_every_ratio() -> None:
    def run(kvtier: float, floor: float) -> Run:
        return Run("Apply", 10, Phase(kvtier), Phase(floor), Phase(1.0), Phase(1.0), 1)

    first = run(30, 10)
    first.operator.idle_per_minute = 0.0  # only the first run watches the idle window
    chosen = median_run([first, run(12, 10), run(15, 10)])
    assert (chosen.operator.seconds, chosen.floor.seconds) == (15, 10)
    assert chosen.ratios == (1.2, 1.5, 3.0)
    assert chosen.operator.idle_per_minute == 0.0
    assert median_run([run(12, 10), run(15, 10)]).operator.seconds == 12  # the lower of two


def _per_tier_without_leases(writes: Counter[tuple[str, str]], tiers: int) -> float:
    return sum(n for (_, res), n in writes.items() if res != "leases") / tiers


@pytest.mark.e2e
def test_apply_writes_per_tier_stay_within_the_controller_floors() -> None:
    """A shortened Apply run (N=50, one repetition, no idle window): kvtier's writes per tier
    exceed floor (c)'s by at most 0.1 (one write per target per change). Writes are counted,
    not timed, so the check does not depend on the machine's speed; the leader-election
    Lease renewals, which come with time, are left out (the benchmark counts them apart)."""
    size = 50
    args = argparse.Namespace(workers=4, keep=False, py_spy=None)
    run = run_one("Apply", size, args, None, 0.0)
    kvtier = _per_tier_without_leases(run.operator.writes, size)
    floor = _per_tier_without_leases(run.controller.writes, size)
    detail = (
        f"kvtier: {per_tier(run.operator.writes, size)}; "
        f"(c): {per_tier(run.controller.writes, size)}"
    )
    assert kvtier <= floor + 0.1, detail
    # The targets themselves: one write each, as floor (a) makes.
    targets = ("inferenceservices", "llminferenceservices")
    assert {k: v for k, v in run.operator.writes.items() if k[1] in targets} == {
        k: v for k, v in run.floor.writes.items() if k[1] in targets
    }, detail


def test_the_docs_keep_every_section_but_the_convergence_one() -> None:
    """--write-docs replaces the Convergence section of docs/performance.md and nothing else
    (the first hour, start-up and eviction sections come from elsewhere)."""
    page = (
        "# Performance\n\n## The first hour\n\nhour\n\n"
        "## Convergence (`make bench`, bench/convergence.py)\n\nold\n\n### Profile\n\nold\n\n"
        "## Start-up (bench/startup.py)\n\nstart\n"
    )
    new = "## Convergence (`make bench`, bench/convergence.py)\n\nnew\n"
    assert with_section(page, new) == (
        "# Performance\n\n## The first hour\n\nhour\n\n"
        "## Convergence (`make bench`, bench/convergence.py)\n\nnew\n\n"
        "## Start-up (bench/startup.py)\n\nstart\n"
    )
    assert with_section("", new) == "# Performance\n\n" + new
    assert with_section("# Performance\n\n## Eviction\n\ne\n", new).endswith("e\n\n" + new)
