"""Pure helpers of the convergence benchmark (run: .venv/bin/pytest bench/test_convergence.py)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

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
    summarize_profile,
    tier_body,
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


def test_workload_and_ratio() -> None:
    assert tier_body(0, "Apply")["spec"]["disk"]["type"] == "NVMe"
    assert tier_body(1, "Plan")["spec"]["targetRef"]["kind"] == "InferenceService"
    assert ratio(3.0, 2.0) == "1.50×" and ratio(1.0, 0.0) == "n/a"


def test_profile_summary(tmp_path: Path) -> None:
    stacks = tmp_path / "p.collapsed"
    stacks.write_text("main (a.py:1);work (a.py:5) 3\nmain (a.py:1) 1\n")
    text = summarize_profile(stacks)
    assert "4 samples" in text and "75.0%  work (a.py:5)" in text


def test_gap_text_puts_the_gap_in_the_operator_cpu_and_its_start() -> None:
    floor = Phase(
        seconds=10.0,
        writes=Counter({("patch", "x"): 1000}),
        cpu_seconds=2.0,
        server_cpu_seconds=9.5,
    )
    operator = Phase(
        seconds=25.0,
        writes=Counter({("patch", "x"): 1000, ("create", "events"): 500}),
        cpu_seconds=16.0,
        server_cpu_seconds=9.0,
    )
    layers = [(LAYERS[1][0], 0.25), (LAYERS[0][0], 0.10), ("other", 0.65)]
    text = gap_text([Run("Apply", 250, operator, floor, Phase(), 0)], cores=2, layers=layers)
    assert "2.50×" in text and "2.00 Event per tier" in text
    assert "used 9.0 CPU-s during the kvtier run and 9.5 during the floor's (-0.5" in text
    assert "used 16.0 CPU-s, the floor 2.0 (+14.0)" in text
    # The API server's saving does not offset the operator's cost: 14 CPU-s on 2 cores.
    assert "Together that is 14.0 CPU-s, about 7.0 s on 2 cores; the other 8.0 s" in text
    assert "1.3× leaves 6.0 CPU-s beyond the floor's" in text  # 0.3 x 10 s x 2 cores
    assert "was 35% of the operator's CPU (about 5.6 CPU-s)" in text


def test_gap_text_counts_the_api_server_extra_work_too() -> None:
    floor = Phase(10.0, Counter({("patch", "x"): 1000}), cpu_seconds=2.0, server_cpu_seconds=9.0)
    operator = Phase(
        13.2,
        Counter({("patch", "x"): 1000}),
        cpu_seconds=6.0,
        server_cpu_seconds=11.4,
    )
    text = gap_text([Run("Apply", 250, operator, floor, Phase(), 0)], cores=2)
    assert "(+2.4: the Events" in text
    assert "Together that is 6.4 CPU-s, about 3.2 s on 2 cores; that is the whole gap" in text


def test_profile_layers_put_each_sample_in_its_first_layer(tmp_path: Path) -> None:
    collapsed = tmp_path / "operator.collapsed"
    collapsed.write_text(
        "main;worker (kopf/_core/reactor/queueing.py:1);handler (kvtier/policy/decide.py:9) 3\n"
        "main;reconcile;decide (kvtier/policy/decide.py:9) 5\n"
        "main;select (selectors.py:1) 2\n"
    )
    assert profile_layers(collapsed) == [
        ("kvtier: deciding (sizing, rendering, conditions)", 0.5),
        ("kopf: dispatching watch events to kvtier's handlers", 0.3),
        ("other", 0.2),
    ]


def test_gap_text_says_when_the_goal_is_met() -> None:
    floor = Phase(seconds=10.0, writes=Counter({("patch", "x"): 1000}))
    operator = Phase(seconds=12.0, writes=Counter({("patch", "x"): 1000, ("create", "events"): 5}))
    assert "Within the 1.3× goal" in gap_text([Run("Apply", 10, operator, floor, Phase(), 0)])


def test_the_median_repetition_is_reported_whole_with_every_ratio() -> None:
    def run(kvtier: float, floor: float) -> Run:
        return Run("Apply", 10, Phase(kvtier), Phase(floor), Phase(1.0), 1)

    first = run(30, 10)
    first.operator.idle_per_minute = 0.0  # only the first run watches the idle window
    chosen = median_run([first, run(12, 10), run(15, 10)])
    assert (chosen.operator.seconds, chosen.floor.seconds) == (15, 10)
    assert chosen.ratios == (1.2, 1.5, 3.0)
    assert chosen.operator.idle_per_minute == 0.0
    assert median_run([run(12, 10), run(15, 10)]).operator.seconds == 12  # the lower of two
