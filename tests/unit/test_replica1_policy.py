"""The replica-1 pool's life cycle from the policy: kvtier's own CephFilesystem first, its
StorageClass only once Rook reports the file system Ready, foreign objects never touched,
and everything kvtier labelled removed when the setting goes."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from kvtier.policy.conditions import FALSE, TRUE
from kvtier.policy.provisioning import policy_writes
from kvtier.policy.replica1 import (
    CONDITION,
    SELECTOR,
    filesystem_key,
    filesystem_refused,
    policy_status_patch,
    policy_step,
)
from kvtier.render import DesiredWrite
from kvtier.tiers.cephfs import REPLICA1

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NS = "openshift-storage"
FS_KEY = ("CephFilesystem", NS, "kvtier-kvcache")
SC_KEY = ("StorageClass", None, "ocs-storagecluster-cephfs-kvcache")


def _policy(generation: int = 1, **replica1: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kvcache.io/v1alpha1",
        "kind": "KVCachePolicy",
        "metadata": {"name": "cluster", "generation": generation, "resourceVersion": "7"},
        "spec": {"cephfs": {"replica1": {"enabled": True, **replica1}}},
    }


def _desired(policy: dict[str, Any]) -> dict[tuple[str, str | None, str], DesiredWrite]:
    return {(w.kind, w.namespace, w.name): w for w in policy_writes(policy)}


def _as_found(write: DesiredWrite, phase: str | None = None, **meta: Any) -> dict[str, Any]:
    obj = copy.deepcopy(write.body)
    obj["metadata"].update(meta)
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def _keys(writes: list[DesiredWrite]) -> list[tuple[str, str, str | None, str]]:
    return [(w.action, w.kind, w.namespace, w.name) for w in writes]


def test_off_means_nothing() -> None:
    step = policy_step(None, {}, [])
    assert step.writes == [] and step.verdict is None
    off = _policy(enabled=False)
    assert policy_step(off, {}, []).writes == []
    assert filesystem_key(off) is None
    assert filesystem_key(_policy()) == (NS, "kvtier-kvcache")


def test_first_the_filesystem_and_no_storage_class_yet() -> None:
    step = policy_step(_policy(), {}, [])
    assert _keys(step.writes) == [("Apply", "CephFilesystem", NS, "kvtier-kvcache")]
    assert step.verdict is not None
    assert (step.verdict.type, step.verdict.status, step.verdict.reason) == (
        CONDITION,
        FALSE,
        "WaitingForFilesystem",
    )
    assert "phase: none yet" in step.verdict.message
    assert "ocs-storagecluster-cephfs-kvcache" in step.verdict.message


def test_waits_while_rook_has_not_reported_ready() -> None:
    policy = _policy()
    fs = _as_found(_desired(policy)[FS_KEY], "Progressing")
    fs["status"]["conditions"] = [
        {"type": "Progressing", "status": "True", "message": "creating pools"}
    ]
    step = policy_step(policy, {FS_KEY: fs}, [fs])
    assert step.writes == []  # the file system already holds kvtier's spec
    assert step.verdict is not None and step.verdict.reason == "WaitingForFilesystem"
    assert "phase: Progressing; Rook: creating pools" in step.verdict.message


def test_ready_filesystem_gets_its_storage_class() -> None:
    policy = _policy()
    fs = _as_found(_desired(policy)[FS_KEY], "Ready")
    step = policy_step(policy, {FS_KEY: fs}, [fs])
    assert _keys(step.writes) == [("Apply", "StorageClass", None, SC_KEY[2])]
    sc = step.writes[0].body
    assert sc["parameters"]["pool"] == "kvtier-kvcache-kvcache"
    assert step.verdict is not None and (step.verdict.status, step.verdict.reason) == (
        TRUE,
        "Ready",
    )
    # Once the class is there, nothing more is written.
    found = _as_found(step.writes[0])
    assert policy_step(policy, {FS_KEY: fs, SC_KEY: found}, [fs, found]).writes == []


def test_a_class_kvtier_made_stays_while_rook_is_briefly_not_ready() -> None:
    policy = _policy()
    fs = _as_found(_desired(policy)[FS_KEY], "Progressing")
    sc = _as_found(_desired(policy)[SC_KEY])
    step = policy_step(policy, {FS_KEY: fs, SC_KEY: sc}, [fs, sc])
    assert step.writes == []
    assert step.verdict is not None and step.verdict.reason == "WaitingForFilesystem"


def test_a_foreign_filesystem_of_that_name_is_never_touched() -> None:
    policy = _policy(filesystemName="ocs-storagecluster-cephfilesystem")
    foreign = {
        "apiVersion": "ceph.rook.io/v1",
        "kind": "CephFilesystem",
        "metadata": {"name": "ocs-storagecluster-cephfilesystem", "namespace": NS},
        "spec": {"dataPools": [{"name": "data0", "replicated": {"size": 3}}]},
        "status": {"phase": "Ready"},
    }
    key = ("CephFilesystem", NS, "ocs-storagecluster-cephfilesystem")
    step = policy_step(policy, {key: foreign}, [])
    assert step.writes == []
    assert step.verdict is not None and step.verdict.reason == "FilesystemNotOwned"


def test_a_foreign_storage_class_of_that_name_is_never_touched() -> None:
    policy = _policy()
    fs = _as_found(_desired(policy)[FS_KEY], "Ready")
    theirs = {"kind": "StorageClass", "metadata": {"name": SC_KEY[2]}, "provisioner": "x"}
    step = policy_step(policy, {FS_KEY: fs, SC_KEY: theirs}, [fs])
    assert step.writes == []
    assert step.verdict is not None and step.verdict.reason == "StorageClassNotOwned"


def test_changed_class_parameters_recreate_the_class() -> None:
    before = _policy()
    fs = _as_found(_desired(before)[FS_KEY], "Ready")
    old = _as_found(_desired(before)[SC_KEY])
    after = _policy(clusterID="0a1b2c3d")
    step = policy_step(after, {FS_KEY: fs, SC_KEY: old}, [fs, old])
    assert _keys(step.writes) == [("Delete", "StorageClass", None, SC_KEY[2])]
    # Next pass, with the class gone, it comes back with the new clusterID.
    step = policy_step(after, {FS_KEY: fs}, [fs])
    assert step.writes[0].body["parameters"]["clusterID"] == "0a1b2c3d"


def test_turning_it_off_deletes_what_kvtier_labelled() -> None:
    on = _policy()
    fs = _as_found(_desired(on)[FS_KEY], "Ready")
    sc = _as_found(_desired(on)[SC_KEY])
    off = _policy(generation=2, enabled=False)
    step = policy_step(off, {}, [fs, sc])
    assert sorted(_keys(step.writes)) == [
        ("Delete", "CephFilesystem", NS, "kvtier-kvcache"),
        ("Delete", "StorageClass", None, SC_KEY[2]),
    ]
    assert step.verdict is not None and step.verdict.reason == "Removing"
    # Rook holds the CR while volumes live in it: no second delete, the wait is reported.
    held = _as_found(_desired(on)[FS_KEY], "Deleting", deletionTimestamp="2026-12-01T12:00:00Z")
    step = policy_step(off, {}, [held])
    assert step.writes == []
    assert step.verdict is not None and step.verdict.reason == "Removing"
    # Gone: no condition any more.
    assert policy_step(off, {}, []).verdict is None


def test_a_renamed_filesystem_replaces_the_old_one() -> None:
    old = _as_found(_desired(_policy())[FS_KEY], "Ready")
    renamed = _policy(filesystemName="kvcache-fs")
    step = policy_step(renamed, {}, [old])
    assert _keys(step.writes) == [
        ("Delete", "CephFilesystem", NS, "kvtier-kvcache"),
        ("Apply", "CephFilesystem", NS, "kvcache-fs"),
    ]


def test_a_filesystem_being_deleted_is_waited_for() -> None:
    policy = _policy()
    fs = _as_found(_desired(policy)[FS_KEY], "Deleting", deletionTimestamp="2026-12-01T12:00:00Z")
    step = policy_step(policy, {FS_KEY: fs}, [fs])
    assert step.writes == []
    assert step.verdict is not None and step.verdict.reason == "FilesystemDeleting"


def test_nvme_classes_are_unaffected() -> None:
    policy = _policy(enabled=False)
    policy["spec"]["nvmePools"] = [
        {"name": "local-nvme", "mountPath": "/var/mnt/nvme", "capacityPerNode": "3Ti"}
    ]
    step = policy_step(policy, {}, [])
    assert _keys(step.writes) == [("Apply", "StorageClass", None, "kvtier-nvme-local-nvme")]
    assert REPLICA1 not in step.writes[0].body["metadata"].get("labels", {})


def test_missing_namespace_or_crd_is_reported() -> None:
    w = _desired(_policy())[FS_KEY]
    verdict = filesystem_refused(w)
    assert (verdict.status, verdict.reason) == (FALSE, "CephClusterNotFound")
    assert "cephClusterNamespace" in verdict.message


def test_policy_status_is_written_only_when_it_changes() -> None:
    policy = _policy(generation=3)
    verdict = policy_step(policy, {}, []).verdict
    patch = policy_status_patch(policy, verdict, NOW)
    assert patch is not None and patch["observedGeneration"] == 3
    [cond] = patch["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        CONDITION,
        FALSE,
        "WaitingForFilesystem",
        3,
    )
    written = {**policy, "status": patch}
    assert policy_status_patch(written, verdict, NOW) is None
    # The setting is gone: the condition goes too; a policy that never had one gets none.
    assert policy_status_patch(written, None, NOW) == {"conditions": None}
    assert policy_status_patch(_policy(enabled=False), None, NOW) is None


def test_selector_names_kvtiers_labels() -> None:
    assert f"app.kubernetes.io/managed-by=kvtier,{REPLICA1}=true" == SELECTOR
