"""What `kubectl get kvt` and `kubectl get kvcp` show: the mode in force (also when the
policy sets it), why a tier or the policy is not Ready, and the policy's own Ready."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from kvtier.api.crd import KVCACHEPOLICY, KVCACHETIER, crd_document
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.policy.decide import decide
from kvtier.policy.policy_ready import policy_ready
from kvtier.policy.replica1 import CONDITION, policy_status_patch
from kvtier.policy.stored import status_patch
from tests.unit.test_decide import POLICY, facts, tier

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SPEC = cast(dict[str, Any], POLICY["spec"])


def columns(definition: Any) -> dict[str, str]:
    (version,) = crd_document(definition)["spec"]["versions"]
    return {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}


def test_tier_columns_read_status_mode_and_ready_reason() -> None:
    cols = columns(KVCACHETIER)
    assert cols["Mode"] == ".status.mode"
    assert cols["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'


def test_policy_has_ready_and_reason_columns() -> None:
    cols = columns(KVCACHEPOLICY)
    assert cols["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert cols["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'


@pytest.mark.parametrize(
    ("spec_mode", "policy_mode", "expected"),
    [(None, "Plan", "Plan"), ("Apply", "Plan", "Apply"), (None, None, "Apply")],
)
def test_status_mode_is_the_mode_in_force(
    spec_mode: str | None, policy_mode: str | None, expected: str
) -> None:
    t = tier()
    if spec_mode is None:
        del t["spec"]["mode"]
    else:
        t["spec"]["mode"] = spec_mode
    spec = dict(SPEC)
    if policy_mode:
        spec["defaults"] = {"mode": policy_mode}
    d = decide(facts(t, policy={**POLICY, "spec": spec}))
    assert d.status["mode"] == expected
    patch = status_patch(None, d.status)  # what the controller writes
    assert patch is not None and patch["mode"] == expected


def test_policy_ready_names_the_bad_field() -> None:
    verdict = policy_ready({"memory": {"maxNodeFraction": 7}}, None)
    assert (verdict.type, verdict.status, verdict.reason) == ("Ready", FALSE, "PolicyInvalid")
    assert verdict.message.startswith("spec.memory.maxNodeFraction:"), verdict.message


def test_policy_ready_follows_the_replica1_pool() -> None:
    waiting = Verdict(CONDITION, FALSE, "WaitingForFilesystem", "Rook says Progressing")
    assert policy_ready(SPEC, waiting) == Verdict(
        "Ready", FALSE, "WaitingForFilesystem", "Rook says Progressing"
    )
    ok = policy_ready(SPEC, Verdict(CONDITION, TRUE, "Ready", "fine"))
    assert (ok.status, ok.reason) == (TRUE, "Accepted")
    assert policy_ready(None, None).status == TRUE


def test_policy_without_a_pool_gets_a_ready_status() -> None:
    policy = {"metadata": {"name": "cluster", "generation": 2}, "spec": SPEC}
    patch = policy_status_patch(policy, None, NOW, policy_ready(SPEC, None))
    assert patch is not None
    [cond] = patch["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Ready", TRUE, "Accepted")
    assert patch["observedGeneration"] == 2
    written = {**policy, "status": patch}
    assert policy_status_patch(written, None, NOW, policy_ready(SPEC, None)) is None
