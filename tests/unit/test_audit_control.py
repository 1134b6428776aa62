"""An audit-based write count fails when the cluster audits nothing (issue R: a "0 writes"
check must not pass on a cluster without an audit log, or one that records no write)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localcluster import AUDIT_CONTROL
from tests.e2e import audit


def _entry(verb: str, resource: str, name: str, user: str = "admin") -> str:
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": user},
            "objectRef": {"resource": resource, "name": name, "namespace": "default"},
            "stageTimestamp": "2026-12-02T06:00:00Z",
        }
    )


def test_a_missing_log_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="audits no writes"):
        audit.writes(tmp_path / "audit.log")


def test_a_log_without_the_control_write_fails(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(_entry("patch", "inferenceservices", "x", audit.OPERATOR_USER) + "\n")
    with pytest.raises(AssertionError, match=AUDIT_CONTROL):
        audit.writes(log)


def test_with_the_control_write_the_operators_writes_count(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        _entry("create", "configmaps", AUDIT_CONTROL),
        _entry("patch", "inferenceservices", "x", audit.OPERATOR_USER),
    ]
    log.write_text("\n".join(lines) + "\n")
    assert audit.writes(log) == {("patch", "inferenceservices"): 1}


def test_a_log_without_any_write_of_the_user_fails(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [_entry("create", "configmaps", AUDIT_CONTROL), _entry("patch", "pods", "p")]
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(AssertionError, match="records no write by"):
        audit.writes(log)
    assert audit.writes(log, user="admin")[("patch", "pods")] == 1
