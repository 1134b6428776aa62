"""The decision from the answers to a reconcile's writes, reusing what the first decision
worked out from the target (contract.Worked), is the decision worked out afresh from them:
for every golden case, and when the answers are judged ours (policy/answers.py) only."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from kvtier.policy.answers import answers_are_ours
from kvtier.policy.contract import Decision, Facts
from kvtier.policy.decide import decide
from kvtier.render import DesiredWrite
from tests.golden.cases import Case, cases, facts
from tests.pod_security import apply_writes

CASES = cases()


def _read(case: Case) -> Facts:
    """The case's facts, its target as a cache holds it: at a resourceVersion."""
    f = facts(case)
    if f.target is None:
        return f
    target = copy.deepcopy(dict(f.target))
    target["metadata"]["resourceVersion"] = "100"
    return replace(f, target=target, target_schemas=f.target_schemas)


def _answered(f: Facts, first: Decision) -> Facts:
    """The facts after the first decision's writes went through: the target as server-side
    apply leaves it (a new generation and resourceVersion), each object kvtier created as
    it sent it, the tier as read (its finalizer write changes neither spec nor status)."""
    assert f.target is not None
    to_target = [w for w in first.writes if w.writes_to(f.target)]
    target = apply_writes(f.target, to_target) if to_target else f.target
    if to_target:
        meta = target["metadata"]
        meta["generation"] = int(meta.get("generation") or 1) + 1
        meta["resourceVersion"] = "answered"
    owned: dict[tuple[str, str | None, str], Any] = dict(f.owned)
    for w in first.writes:
        if w.action == "Apply" and not w.writes_to(f.target):
            owned[(w.kind, w.namespace, w.name)] = copy.deepcopy(w.body)
    return replace(f, target=target, owned=owned)


def _shape(d: Decision) -> dict[str, Any]:
    """Everything the operator acts on or writes, the writes without their guard (the
    generation they were rendered from: the basis's, one less than the answer's)."""

    def writes(ws: list[DesiredWrite]) -> list[tuple[Any, ...]]:
        return [(w.action, w.api_version, w.kind, w.namespace, w.name, w.body) for w in ws]

    return {
        "status": d.status,
        "events": d.events,
        "writes": writes(d.writes),
        "held": writes(d.held),
        "desired": writes(d.desired),
        "disk_status": d.disk_status,
        "applied": d.applied,
        "probe": d.probe,
        "sizing": d.sizing,
    }


def _ours(f: Facts, first: Decision, after: Facts) -> bool:
    """answers_are_ours as the controller asks it, each guarded apply to the target sent
    against the resourceVersion read and answered with the answer's."""
    assert f.target is not None and after.target is not None
    bases = {
        (w.kind, w.namespace, w.name): (
            str(f.target["metadata"].get("resourceVersion")),
            str(after.target["metadata"].get("resourceVersion")),
        )
        for w in first.writes
        if w.writes_to(f.target)
    }
    return answers_are_ours(
        f,
        f.tier,
        after.target,
        f.scheduler_configmaps,
        f.llmisvc_configs,
        first.writes,
        bases,
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reused_work_decides_as_a_fresh_decision(case: Case) -> None:
    f = _read(case)
    first = decide(f)
    if f.target is None:
        assert first.worked is None
        return
    assert first.worked is not None and first.worked.basis is f.target
    after = _answered(f, first)
    if not _ours(f, first, after):
        # Then the controller decides afresh; cases of that kind are counted below.
        return
    fresh = decide(after)
    reused = decide(replace(after, worked=first.worked))
    assert _shape(reused) == _shape(fresh)
    # Nothing was worked out again from the answer: its facts and render are the first's.
    assert reused.worked is not None and reused.worked.basis is f.target
    assert reused.worked.render is first.worked.render


def test_most_cases_reuse() -> None:
    """The reuse is the common path: every target kind's cases take it."""
    kinds = set()
    for case in CASES:
        f = _read(case)
        first = decide(f)
        if f.target is not None and _ours(f, first, _answered(f, first)):
            kinds.add(f.target["kind"])
    assert kinds >= {"InferenceService", "LLMInferenceService", "Deployment", "StatefulSet"}


def _isvc_case() -> tuple[Facts, Decision]:
    case = next(c for c in CASES if c.name.startswith("isvc-v1beta1__nvme-pv"))
    f = _read(case)
    first = decide(f)
    assert f.target is not None and any(w.writes_to(f.target) for w in first.writes)
    return f, first


def _check(f: Facts, first: Decision, **changes: Any) -> bool:
    after = _answered(f, first)
    assert after.target is not None
    target_write = next(w for w in first.writes if w.writes_to(f.target))
    key = (target_write.kind, target_write.namespace, target_write.name)
    read_version = str(f.target["metadata"].get("resourceVersion"))
    args: dict[str, Any] = {
        "tier": f.tier,
        "target": after.target,
        "scheduler_configmaps": f.scheduler_configmaps,
        "llmisvc_configs": f.llmisvc_configs,
        "written": first.writes,
        "bases": {key: (read_version, "answered")},
    }
    args.update(changes)
    return answers_are_ours(f, **args)


def test_answers_are_ours_only_when_nothing_else_changed() -> None:
    f, first = _isvc_case()
    assert f.target is not None
    assert _check(f, first)
    # The tier edited meanwhile (its finalizer write answered a new spec).
    edited = copy.deepcopy(dict(f.tier))
    edited["spec"]["mode"] = "Plan"
    assert not _check(f, first, tier=edited)
    # The apply was sent against another resourceVersion than the one decided from, or was
    # sent with no target cached (no base), or the target cached now is not its answer.
    target_write = next(w for w in first.writes if w.writes_to(f.target))
    key = (target_write.kind, target_write.namespace, target_write.name)
    assert not _check(f, first, bases={key: ("other", "answered")})
    assert not _check(f, first, bases={})
    newer = copy.deepcopy(_answered(f, first).target)
    assert newer is not None
    newer["metadata"]["resourceVersion"] = "later"
    assert not _check(f, first, target=newer)
    other_version = copy.deepcopy(_answered(f, first).target)
    assert other_version is not None
    other_version["apiVersion"] = "serving.kserve.io/v1beta2"  # another version's view
    assert not _check(f, first, target=other_version)
    regenerated = copy.deepcopy(dict(f.tier))
    regenerated["metadata"]["generation"] = int(regenerated["metadata"].get("generation") or 1) + 1
    assert not _check(f, first, tier=regenerated)
    # A write to an object the rendering reads (a scheduler ConfigMap), or those read again
    # changed.
    namespace = f.target["metadata"]["namespace"]
    configmap = DesiredWrite("Apply", "v1", "ConfigMap", "router", namespace, {}, "router")
    assert not _check(f, first, written=[*first.writes, configmap])
    assert not _check(f, first, scheduler_configmaps=[{"metadata": {"name": "new"}}])
    assert not _check(f, first, llmisvc_configs={("ns", "c"): {}})
    # No target write: only when the target is still the very object read.
    others = [w for w in first.writes if not w.writes_to(f.target)]
    assert _check(f, first, written=others, target=f.target)
    assert not _check(f, first, written=others, target=copy.deepcopy(f.target))
