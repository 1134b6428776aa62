"""Apply-mode decisions: which writes are still needed, and what the cluster shows of them.

Pure functions over rendered writes and observed objects, so an idle operator can tell a
write that would change nothing and skip it (zero writes when nothing changed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvtier.api.common import quantity_bytes
from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import ConditionType, KVCacheTierSpec
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.policy.effective import effective_settings, nvme_pools
from kvtier.render import DesiredWrite, unapply_body
from kvtier.render.cephfs import replica1_writes
from kvtier.render.labels import RETENTION
from kvtier.render.nvme import nvme_storage_class
from kvtier.render.targets import APPLIED_ANNOTATION

# Cluster-scoped objects a tier's rendering names but only the policy may write: per-pool
# StorageClasses and the replica-1 Ceph pool (a namespaced tier never triggers them).
POLICY_SCOPED_KINDS = frozenset({"StorageClass", "CephFilesystem"})


def covers(current: Any, desired: Any) -> bool:
    """Whether `current` already holds everything `desired` sets (server-side apply would
    change nothing). Lists of objects match item by item in any order; other lists exactly."""
    if isinstance(desired, Mapping):
        if not isinstance(current, Mapping):
            return False
        return all(k in current and covers(current[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(current, list):
            return False
        if all(isinstance(d, Mapping) for d in desired):
            return all(any(covers(c, d) for c in current) for d in desired)
        return current == desired
    if isinstance(desired, (int, float)) and isinstance(current, (int, float)):
        return bool(current == desired)
    return bool(current == desired) or str(current) == str(desired)


def split_writes(
    writes: Iterable[DesiredWrite],
) -> tuple[list[DesiredWrite], list[DesiredWrite]]:
    """(tier-scoped writes, policy-scoped writes)."""
    tier: list[DesiredWrite] = []
    policy: list[DesiredWrite] = []
    for w in writes:
        (policy if w.kind in POLICY_SCOPED_KINDS else tier).append(w)
    return tier, policy


def object_key(obj: Mapping[str, Any]) -> tuple[str, str | None, str]:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind")), meta.get("namespace"), str(meta.get("name")))


def pending_writes(
    writes: Sequence[DesiredWrite], observed: Mapping[tuple[str, str | None, str], Any]
) -> list[DesiredWrite]:
    """The writes the observed objects do not already satisfy.

    A PersistentVolume's source and node affinity cannot change in place (a pool's
    mountPath or volumeSource edited in the policy): an unbound one is deleted, and the next
    reconcile creates it anew; a bound one waits until its claim lets go.
    """
    needed = []
    for w in writes:
        current = observed.get((w.kind, w.namespace, w.name))
        if w.action == "Delete":
            if current is not None:
                needed.append(w)
        elif current is None:
            needed.append(w)
        elif not covers(current, w.body):
            if w.kind == "PersistentVolumeClaim":
                if _claim_can_change(current, w.body):
                    needed.append(w)
            elif w.kind != "PersistentVolume":
                needed.append(w)
            elif not covers(current.get("spec") or {}, _immutable_volume_spec(w.body)):
                if (current.get("status") or {}).get("phase") != "Bound":
                    needed.append(
                        DesiredWrite(
                            "Delete",
                            w.api_version,
                            w.kind,
                            w.name,
                            None,
                            {},
                            f"PersistentVolume {w.name}: its pool changed; recreated anew",
                        )
                    )
            else:
                needed.append(w)
    return needed


def _claim_can_change(current: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """A bound claim only grows: a new class, access mode or selector (the policy changed),
    or a smaller size (the sizing dropped), would be refused on every attempt. The claim
    keeps serving as it is."""
    spec, want = current.get("spec") or {}, body.get("spec") or {}
    for key in ("storageClassName", "accessModes", "volumeMode", "selector"):
        if key in want and spec.get(key) != want[key]:
            return False
    have = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    asked = ((want.get("resources") or {}).get("requests") or {}).get("storage")
    return not (have and asked and quantity_bytes(str(asked)) < quantity_bytes(str(have)))


def _immutable_volume_spec(body: Mapping[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    return {k: spec[k] for k in ("local", "hostPath", "nodeAffinity") if k in spec}


def provisioned_verdict(
    disk: str | None,
    writes: Sequence[DesiredWrite],
    observed: Mapping[tuple[str, str | None, str], Any],
) -> Verdict:
    """Provisioned: every storage object exists; a shared claim is Bound."""
    storage = [w for w in writes if w.kind in ("PersistentVolume", "PersistentVolumeClaim")]
    if disk is None:
        return Verdict(ConditionType.PROVISIONED.value, TRUE, "CPUOnly", "no disk tier needed")
    missing = [w for w in storage if (w.kind, w.namespace, w.name) not in observed]
    if missing:
        return Verdict(
            ConditionType.PROVISIONED.value,
            FALSE,
            "Provisioning",
            f"waiting for {len(missing)} object(s): "
            + ", ".join(f"{w.kind} {w.name}" for w in missing[:5]),
        )
    for w in storage:
        obj = observed[(w.kind, w.namespace, w.name)]
        phase = (obj.get("status") or {}).get("phase")
        if w.kind == "PersistentVolumeClaim" and phase != "Bound":
            return Verdict(
                ConditionType.PROVISIONED.value,
                FALSE,
                "ClaimPending",
                f"PersistentVolumeClaim {w.name} is {phase or 'Pending'}: no volume bound yet",
            )
    pvs = sum(1 for w in storage if w.kind == "PersistentVolume")
    what = f"{pvs} local PersistentVolume(s)" if pvs else "shared claim Bound"
    return Verdict(ConditionType.PROVISIONED.value, TRUE, "Provisioned", f"{disk} tier: {what}")


def applied_verdict(target_write: DesiredWrite | None, target: Mapping[str, Any] | None) -> Verdict:
    if target_write is None or target is None:
        return Verdict(ConditionType.APPLIED.value, FALSE, "NotApplied", "no target patch")
    if covers(target, target_write.body):
        return Verdict(
            ConditionType.APPLIED.value,
            TRUE,
            "Applied",
            f"{target_write.kind} {target_write.name} carries kvtier's offload configuration",
        )
    return Verdict(
        ConditionType.APPLIED.value,
        FALSE,
        "Applying",
        f"{target_write.kind} {target_write.name} does not carry the configuration yet",
    )


def disk_tier_status(
    disk: str | None,
    writes: Sequence[DesiredWrite],
    observed: Mapping[tuple[str, str | None, str], Any],
) -> dict[str, Any]:
    """Fields of the disk tier's status.tiers entry as the cluster shows them."""
    if disk is None:
        return {}
    out: dict[str, Any] = {}
    claims = [w for w in writes if w.kind == "PersistentVolumeClaim"]
    pvs = [w for w in writes if w.kind == "PersistentVolume"]
    if claims:
        claim = claims[0]
        out["claimName"] = claim.name
        current = observed.get((claim.kind, claim.namespace, claim.name)) or {}
        capacity = ((current.get("status") or {}).get("capacity") or {}).get("storage")
        requested = claim.body["spec"]["resources"]["requests"]["storage"]
        out["capacityQuantity"] = capacity or requested
        out["ready"] = (current.get("status") or {}).get("phase") == "Bound"
    elif pvs:
        out["capacityQuantity"] = pvs[0].body["spec"]["capacity"]["storage"]
        out["ready"] = all((p.kind, p.namespace, p.name) in observed for p in pvs)
    return out


def policy_writes(policy: Mapping[str, Any] | None) -> list[DesiredWrite]:
    """The cluster-scoped objects only the KVCachePolicy triggers: one no-provisioner
    StorageClass per NVMe pool, and the replica-1 CephFS pool with its class when enabled."""

    spec = KVCachePolicySpec.model_validate((policy or {}).get("spec") or {}) if policy else None
    # Policy-sourced settings do not depend on any tier: evaluate them against a bare spec.
    bare = KVCacheTierSpec.model_validate(
        {
            "targetRef": {"kind": "LLMInferenceService", "name": "policy"},
            "workload": {"averageContextTokens": 1, "concurrentSessions": 1},
        }
    )
    settings = effective_settings(bare, spec)
    return [*(nvme_storage_class(p) for p in nvme_pools(spec)), *replica1_writes(settings)]


def removal_writes(
    target: Mapping[str, Any] | None,
    owned: Iterable[Mapping[str, Any]],
    delete_claims: bool,
) -> list[DesiredWrite]:
    """Taking a tier back: the target returns to the user's values, owned storage goes
    unless retained (PVs carry their pool's retention; claims follow the policy)."""

    writes: list[DesiredWrite] = []
    if target is not None:
        annotations = (target.get("metadata") or {}).get("annotations") or {}
        # Only while kvtier's record is there: once taken back, the record is gone, and a
        # second take-back would drop the user's values kvtier had restored.
        if APPLIED_ANNOTATION in annotations:
            body = unapply_body(target)
            meta = body["metadata"]
            writes.append(
                DesiredWrite(
                    "Apply",
                    body["apiVersion"],
                    body["kind"],
                    meta["name"],
                    meta.get("namespace"),
                    body,
                    f"{body['kind']} {meta['name']}: back to the user's own configuration",
                )
            )
    for obj in owned:
        kind, namespace, name = object_key(obj)
        meta = obj.get("metadata") or {}
        if kind == "PersistentVolume":
            keep = (meta.get("annotations") or {}).get(RETENTION) == "Retain"
        else:
            keep = not delete_claims
        if not keep:
            writes.append(
                DesiredWrite(
                    "Delete",
                    str(obj.get("apiVersion")),
                    kind,
                    name,
                    namespace,
                    {},
                    f"{kind} {name}: removed with the tier",
                )
            )
    return writes
