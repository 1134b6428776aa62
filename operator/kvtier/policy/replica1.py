"""The KVCachePolicy's own writes, and the replica-1 CephFS pool's life cycle.

Pure functions from the policy and what the cluster shows to the writes still due and the
policy's `Replica1PoolReady` condition:

1. kvtier's CephFilesystem is applied (created, or brought back to kvtier's spec) unless an
   object of that name exists that kvtier did not create: that one is never changed (its
   `dataPools` is an atomic list another operator owns), and the condition says so.
2. The StorageClass is created only once Rook reports the file system `status.phase: Ready`;
   until then the condition is False with reason WaitingForFilesystem and nothing else is
   created for the pool (a claim on a class whose pool does not exist would only fail).
   A class kvtier made stays while the file system is briefly not Ready (a Rook upgrade).
   StorageClass parameters are immutable: a class whose driver or parameters changed in the
   policy is deleted and created anew on the next pass (bound volumes keep working).
3. Removing the setting (enabled false, another filesystemName, storageClassName or
   cephClusterNamespace, or no policy): kvtier deletes the StorageClass and the
   CephFilesystem it labelled as its own. The data is only cache, so the file system and its
   pools go with the CR (preserve*OnDelete false); Rook holds the deletion while CephFS
   volumes still live in it, so a tier that still mounts one keeps working until its claim
   is released, and the condition reports the wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kvtier.names.labels import MANAGED_BY, MANAGER
from kvtier.policy.conditions import FALSE, TRUE, Verdict, merge_conditions
from kvtier.policy.provisioning import (
    covers,
    object_key,
    pending_writes,
    policy_settings,
    policy_writes,
)
from kvtier.render import DesiredWrite
from kvtier.tiers.cephfs import REPLICA1, replica1_ceph_pool

CONDITION = "Replica1PoolReady"
# Label selector of kvtier's replica-1 objects (CephFilesystem, StorageClass).
SELECTOR = f"{MANAGED_BY}={MANAGER},{REPLICA1}=true"
# What `owned` lists: (apiVersion, kind) of kvtier's replica-1 objects.
OWNED_KINDS = (("ceph.rook.io/v1", "CephFilesystem"), ("storage.k8s.io/v1", "StorageClass"))
# How long until the policy looks again when the Ceph namespace or Rook's CRD is missing
# (kvtier watches neither namespaces nor CRDs, so nothing announces them).
RECHECK_SECONDS = 60.0
# StorageClass fields the API server refuses to change.
_IMMUTABLE_CLASS_FIELDS = ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode")

Key = tuple[str, str | None, str]


@dataclass(frozen=True)
class PolicyStep:
    """The policy's writes still due, in order, and the replica-1 condition (None when the
    policy does not enable the pool and nothing of it is left)."""

    writes: list[DesiredWrite] = field(default_factory=list)
    verdict: Verdict | None = None


def filesystem_key(policy: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(namespace, name) of the CephFilesystem the policy wants, None when it wants none."""
    settings = policy_settings(policy)
    if not settings.replica1_enabled.value:
        return None
    return settings.replica1_ceph_namespace.value, settings.replica1_filesystem.value


def is_replica1(obj: Mapping[str, Any]) -> bool:
    """Whether kvtier created the object for the replica-1 pool (it carries the labels)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY) == MANAGER and labels.get(REPLICA1) == "true")


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _where(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _delete(obj: Mapping[str, Any], why: str) -> DesiredWrite:
    kind, namespace, name = object_key(obj)
    return DesiredWrite(
        "Delete",
        str(obj.get("apiVersion")),
        kind,
        name,
        namespace,
        {},
        f"{_where(kind, namespace, name)}: {why}",
    )


def filesystem_phase(obj: Mapping[str, Any] | None) -> str | None:
    phase = ((obj or {}).get("status") or {}).get("phase")
    return str(phase) if phase else None


def _rook_says(obj: Mapping[str, Any] | None) -> str:
    """The latest message Rook put in the file system's conditions, if any."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    messages = [str(c.get("message")) for c in conditions if isinstance(c, Mapping)]
    messages = [m for m in messages if m and m != "None"]
    return f"; Rook: {messages[-1][:500]}" if messages else ""


def _class_changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether an immutable field of the class differs (only a new class can change it)."""
    return any(
        key in desired and current.get(key) != desired[key] for key in _IMMUTABLE_CLASS_FIELDS
    )


def policy_step(
    policy: Mapping[str, Any] | None,
    observed: Mapping[Key, Any],
    owned: Sequence[Mapping[str, Any]],
) -> PolicyStep:
    """The writes the policy still needs and the replica-1 condition.

    `observed`: the current object for each of `policy_writes(policy)` that exists (GET);
    `owned`: every object labelled as kvtier's replica-1 objects (LIST by SELECTOR).
    """
    writes = policy_writes(policy)
    replica1 = [w for w in writes if is_replica1(w.body)]
    others = [w for w in writes if not is_replica1(w.body)]
    todo = pending_writes(others, observed)
    wanted = {(w.kind, w.namespace, w.name) for w in replica1}
    leftovers = [o for o in owned if object_key(o) not in wanted]
    todo += [
        _delete(o, "the KVCachePolicy no longer names it (replica-1 pool)")
        for o in leftovers
        if not _deleting(o)
    ]
    if not replica1:
        going = [o for o in leftovers if o.get("kind") == "CephFilesystem"]
        if not going:
            return PolicyStep(todo)
        names = ", ".join(_where(*object_key(o)) for o in going)
        return PolicyStep(
            todo,
            Verdict(
                CONDITION,
                FALSE,
                "Removing",
                f"the replica-1 pool is off: deleting {names}; Rook removes a file system "
                "once no CephFS volume lives in it",
            ),
        )
    fs_write, class_write = replica1
    fs_where = _where(fs_write.kind, fs_write.namespace, fs_write.name)
    fs = observed.get((fs_write.kind, fs_write.namespace, fs_write.name))
    if fs is not None and not is_replica1(fs):
        return PolicyStep(
            todo,
            Verdict(
                CONDITION,
                FALSE,
                "FilesystemNotOwned",
                f"{fs_where} exists and was not created by kvtier: kvtier never changes it "
                "(its data pools belong to whoever made it); set "
                "spec.cephfs.replica1.filesystemName to a free name",
            ),
        )
    if fs is not None and _deleting(fs):
        return PolicyStep(
            todo,
            Verdict(
                CONDITION,
                FALSE,
                "FilesystemDeleting",
                f"{fs_where} is being deleted (Rook waits until no CephFS volume lives in "
                "it); kvtier creates it anew afterwards",
            ),
        )
    todo += pending_writes([fs_write], observed)
    phase = filesystem_phase(fs)
    sc_key = (class_write.kind, class_write.namespace, class_write.name)
    sc = observed.get(sc_key)
    if sc is not None and not is_replica1(sc):
        return PolicyStep(
            todo,
            Verdict(
                CONDITION,
                FALSE,
                "StorageClassNotOwned",
                f"StorageClass {class_write.name} exists and was not created by kvtier: set "
                "spec.cephfs.replica1.storageClassName to a free name",
            ),
        )
    if phase != "Ready":
        return PolicyStep(
            todo,
            Verdict(
                CONDITION,
                FALSE,
                "WaitingForFilesystem",
                f"waiting for Rook to report {fs_where} Ready (phase: "
                f"{phase or 'none yet'}{_rook_says(fs)}); StorageClass {class_write.name} is "
                "created then",
            ),
        )
    if sc is not None and _class_changed(sc, class_write.body):
        todo.append(
            DesiredWrite(
                "Delete",
                class_write.api_version,
                class_write.kind,
                class_write.name,
                None,
                {},
                f"StorageClass {class_write.name}: its driver or parameters changed in the "
                "policy; created anew (bound volumes keep working)",
            )
        )
    elif sc is None or not covers(sc, class_write.body):
        todo.append(class_write)
    settings = policy_settings(policy)
    return PolicyStep(
        todo,
        Verdict(
            CONDITION,
            TRUE,
            "Ready",
            f"{fs_where} is Ready; StorageClass {class_write.name} places CephFS volumes on "
            f"its pool {replica1_ceph_pool(settings)} (replica size 1)",
        ),
    )


def filesystem_refused(write: DesiredWrite) -> Verdict:
    """The condition when the API server has nowhere to put kvtier's CephFilesystem (404)."""
    return Verdict(
        CONDITION,
        FALSE,
        "CephClusterNotFound",
        f"{_where(write.kind, write.namespace, write.name)} cannot be created: no namespace "
        f"{write.namespace} or no Rook CephFilesystem CRD on this cluster; set "
        "spec.cephfs.replica1.cephClusterNamespace to the Ceph cluster's namespace",
    )


def policy_status_patch(
    policy: Mapping[str, Any],
    verdict: Verdict | None,
    now: datetime,
    ready: Verdict | None = None,
) -> dict[str, Any] | None:
    """The status merge patch for the policy, or None when its status already says it: the
    replica-1 condition (`verdict`, None when there is no pool) and `ready`, if given."""
    status = policy.get("status") or {}
    previous = status.get("conditions") or []
    generation = (policy.get("metadata") or {}).get("generation")
    written = {CONDITION} | ({ready.type} if ready else set())
    others = [c for c in previous if isinstance(c, Mapping) and c.get("type") not in written]
    verdicts = [v for v in (ready, verdict) if v is not None]
    mine = merge_conditions(previous, verdicts, generation, now)
    conditions = [*others, *mine]
    if conditions == previous:
        return None
    patch: dict[str, Any] = {"conditions": conditions or None}
    if generation is not None and conditions:
        patch["observedGeneration"] = generation
    return patch
