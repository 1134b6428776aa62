"""Ready names the first blocker in the order docs/troubleshooting.md documents, and a refused
tier says so instead of waiting for writes it never makes."""

from __future__ import annotations

import copy
import functools
import itertools
import random
import re
from pathlib import Path
from typing import Any

import pytest

from kvtier.api.tier import ConditionType
from kvtier.policy import ready as ready_module
from kvtier.policy.conditions import FALSE, TRUE, UNKNOWN, Verdict
from kvtier.policy.decide import decide
from kvtier.policy.ready import ready_verdict
from tests.unit.test_decide import POLICY, conds, facts, tier
from tests.unit.test_render_targets import _isvc

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
NVME = {"type": "NVMe", "nvme": {"pool": "local-nvme"}}
ABSENT = None
STATES = (TRUE, FALSE, UNKNOWN, ABSENT)


def ready_section() -> str:
    return DOC.read_text(encoding="utf-8").split("\n## Ready\n", 1)[1].split("\n## ", 1)[0]


@functools.cache
def documented_order() -> tuple[str, ...]:
    """The condition column of the Ready section's order table, top to bottom."""
    section = ready_section()
    rows = re.findall(r"^\| (\d+) \| `([A-Za-z]+)` \|", section, re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), rows
    return tuple(name for _, name in rows)


@functools.cache
def documented_never_block() -> tuple[str, ...]:
    """The conditions the Ready section says never block it."""
    line = next(x for x in ready_section().splitlines() if "never block" in x)
    return tuple(re.findall(r"`([A-Za-z]+)`", line.split("never block")[0]))


def fine(ctype: str, status: str) -> bool:
    return status == (FALSE if ctype in ("Conflict", "DiskPressure") else TRUE)


def verdict(ctype: str, status: str) -> Verdict:
    # Reason and message unique per condition and status: Ready's show which one it copied.
    return Verdict(ctype, status, f"R{ctype}{status}", f"{ctype} is {status}")


def expected(states: dict[str, str | None], mode: str) -> tuple[str, str, str]:
    """The oracle: the documented order read top to bottom."""
    for ctype in documented_order():
        status = states.get(ctype)
        if status is None:
            if ctype == "Sized":
                return FALSE, "NotSized", "sizing has not run"
            continue
        if not fine(ctype, status):
            return FALSE, f"R{ctype}{status}", f"{ctype} is {status}"
    return (TRUE, "Planned", "Plan mode") if mode == "Plan" else (TRUE, "Applied", "tiers")


def test_ready_is_the_first_blocker_in_every_combination_of_states() -> None:
    blocking, never = documented_order(), documented_never_block()
    never_combos = list(itertools.product(STATES, repeat=len(never)))
    checked = 0
    for i, (combo, mode) in enumerate(
        itertools.product(itertools.product(STATES, repeat=len(blocking)), ("Apply", "Plan"))
    ):
        states = dict(zip(blocking, combo, strict=True))
        # Every state of the conditions that never block comes with many blocking combinations.
        states.update(zip(never, never_combos[i % len(never_combos)], strict=True))
        verdicts = [verdict(c, s) for c, s in states.items() if s is not None]
        random.Random(i).shuffle(verdicts)  # the order of the list never decides
        ready = ready_verdict(verdicts, mode)
        status, reason, message = expected(states, mode)
        assert ready.type == "Ready"
        assert (ready.status, ready.reason) == (status, reason), (states, mode, verdicts)
        assert ready.message.startswith(message), (states, mode)
        checked += 1
    assert checked == 2 * len(STATES) ** len(blocking)


def test_conditions_that_never_block_leave_a_fine_tier_ready() -> None:
    never = documented_never_block()
    fine_ones = [
        Verdict(c, FALSE if c == "Conflict" else TRUE, "ok", "ok") for c in documented_order()
    ]
    for combo in itertools.product(STATES, repeat=len(never)):
        others = [verdict(c, s) for c, s in zip(never, combo, strict=True) if s]
        ready = ready_verdict([*others, *fine_ones], "Apply")
        assert (ready.status, ready.reason) == (TRUE, "Applied"), combo


def test_the_documented_order_is_the_codes() -> None:
    assert documented_order() == tuple(c.value for c in ready_module.PRECEDENCE)
    assert documented_never_block() == tuple(c.value for c in ready_module.NEVER_BLOCK)
    # Every condition type a tier has is in one of the two.
    every = {c.value for c in ConditionType} - {"Ready"}
    assert set(documented_order()) | set(documented_never_block()) == every


def test_a_refusal_turns_the_held_back_steps_into_blocked() -> None:
    claimed = Verdict("Conflict", TRUE, "TargetClaimed", "another tier")
    waiting = [
        Verdict("Provisioned", FALSE, "Provisioning", "waiting for 8 object(s)"),
        Verdict("Applied", FALSE, "Applying", "not yet"),
        Verdict("Probed", FALSE, "WaitingForStorage", "NVMe tier not provisioned"),
    ]
    held = ready_module.hold_back([*waiting, claimed])
    assert [(v.type, v.reason) for v in held[:3]] == [
        ("Provisioned", "Blocked"),
        ("Applied", "Blocked"),
        ("Probed", "Blocked"),
    ]
    assert all("Conflict is True (TargetClaimed)" in v.message for v in held[:3])
    assert held[3] == claimed
    # What the cluster already shows stays (storage made, target carrying it, a probe result).
    done = [
        Verdict("Provisioned", TRUE, "Provisioned", "NVMe tier: 3 local PersistentVolume(s)"),
        Verdict("Applied", TRUE, "Applied", "carries it"),
    ]
    assert ready_module.hold_back([*done, claimed]) == [*done, claimed]
    # Without a refusal the steps report their progress as they are.
    assert ready_module.hold_back(waiting) == waiting


def _names(d: Any) -> dict[str, tuple[str, str, str]]:
    return {t: (c["status"], c["reason"], c["message"]) for t, c in conds(d.status).items()}


@pytest.mark.parametrize(
    ("spec", "kw", "ctype", "reason"),
    [
        (
            {"mode": "Apply", "disk": NVME},
            {"rivals": [(1, "2026-11-30T09:00:00Z", "first")]},
            "Conflict",
            "TargetClaimed",
        ),
        (
            {"mode": "Apply", "disk": NVME, "cpu": {"size": "1Ti"}},
            {},
            "PolicyCompliant",
            "CPUTierAboveLimit",
        ),
    ],
    ids=["target-claimed", "cpu-tier-above-limit"],
)
def test_a_refused_nvme_tier_names_the_refusal_not_pending_volumes(
    spec: dict[str, Any], kw: dict[str, Any], ctype: str, reason: str
) -> None:
    t = tier(**spec)
    t["metadata"]["creationTimestamp"] = "2026-11-30T10:00:00Z"
    d = decide(facts(t, **kw))
    c = _names(d)
    assert c["Ready"] == (FALSE, reason, c[ctype][2])
    for step in ("Provisioned", "Applied", "Probed"):
        assert c[step][:2] == (FALSE, "Blocked") and f"({reason})" in c[step][2], c[step]
    assert not any("waiting for" in m for _, _, m in c.values()), c
    assert d.writes == [] and d.probe is None
    assert d.status["plan"]["summary"].endswith(f"Not applied: {ctype} is {c[ctype][0]} ({reason})")


def test_an_accepted_nvme_tier_still_waits_for_its_volumes() -> None:
    d = decide(facts(tier(mode="Apply", disk=NVME)))
    c = _names(d)
    assert c["Provisioned"][:2] == (FALSE, "Provisioning") and "waiting for" in c["Provisioned"][2]
    assert c["Ready"] == c["Provisioned"]
    assert any(w.kind == "PersistentVolume" for w in d.writes)


def test_an_unknown_pool_is_named_with_the_policys_pools() -> None:
    d = decide(facts(tier(disk={"type": "NVMe", "nvme": {"pool": "nope"}})))
    c = _names(d)
    assert c["Sized"][:2] == (FALSE, "NVMePoolNotFound")
    assert "pool 'nope'" in c["Sized"][2] and "(defined: local-nvme)" in c["Sized"][2]
    assert "not available here" not in c["Sized"][2]
    assert c["Ready"] == (FALSE, "UnknownNVMePool", c["PolicyCompliant"][2])
    assert "pool 'nope'" in c["Ready"][2] and "local-nvme" in c["Ready"][2]


def test_without_a_policy_the_message_names_the_missing_policy_and_how_to_create_it() -> None:
    d = decide(facts(tier(disk=NVME), policy=None))
    c = _names(d)
    assert c["Sized"][:2] == (FALSE, "NVMePoolNotFound")
    assert c["Ready"][:2] == (FALSE, "UnknownNVMePool")
    for ctype in ("Sized", "PolicyCompliant", "Ready"):
        message = c[ctype][2]
        assert "pool 'local-nvme'" in message
        assert "no KVCachePolicy 'cluster'" in message, message
        assert "kubectl explain kvcachepolicy.spec.nvmePools" in message
        assert "not available here" not in message and "defined: none" not in message


def test_an_invalid_policy_is_named_as_the_reason_for_no_pool() -> None:
    d = decide(facts(tier(disk=NVME), policy={"spec": {"nvmePools": "not a list"}}))
    c = _names(d)
    assert c["Ready"][:2] == (FALSE, "PolicyInvalid")
    assert c["Sized"][:2] == (FALSE, "NVMePoolNotFound")
    assert "KVCachePolicy 'cluster' is invalid" in c["Sized"][2]


def test_an_nvme_default_without_a_pool_names_the_pools_to_choose_from() -> None:
    policy = copy.deepcopy(POLICY)
    policy["spec"]["defaults"] = {"diskType": "NVMe"}
    d = decide(facts(tier(), policy=policy))
    c = _names(d)
    assert c["Ready"] == c["Sized"]
    assert c["Sized"][:2] == (FALSE, "NVMePoolNotFound")
    assert "needs a pool" in c["Sized"][2] and "(defined: local-nvme)" in c["Sized"][2]


@pytest.mark.parametrize("mode", ["Apply", "Plan"])
def test_a_users_own_flag_is_the_blocker_in_both_modes(mode: str) -> None:
    target = _isvc()
    target["spec"]["predictor"]["model"]["args"] += ["--kv-transfer-config", "{}"]
    ref = {"apiVersion": target["apiVersion"], "kind": target["kind"], "name": "llama-3-1-70b"}
    d = decide(facts(tier(mode=mode, targetRef=ref, disk={"type": "None"}), target=target))
    c = _names(d)
    assert c["Ready"] == (FALSE, "KVTransferConfigInUse", c["Conflict"][2])
    # Plan mode has no Applied; Apply mode's says it is held back, not "Conflict" or "Applying".
    if mode == "Plan":
        assert "Applied" not in c
    else:
        assert (
            c["Applied"][:2] == (FALSE, "Blocked") and "(KVTransferConfigInUse)" in c["Applied"][2]
        )
    assert d.writes == []
