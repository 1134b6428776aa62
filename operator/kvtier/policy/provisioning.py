"""Apply-mode decisions: which writes are still needed, and what the cluster shows of them.

Pure functions over rendered writes and observed objects, so an idle operator can tell a
write that would change nothing and skip it (zero writes when nothing changed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from kvtier.api.common import quantity_bytes
from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import ConditionType, KVCacheTierSpec
from kvtier.names.labels import RETENTION
from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.render import DesiredWrite
from kvtier.settings import EffectiveSettings, effective_settings
from kvtier.targets.registry import KINDS, unapply_writes
from kvtier.tiers.registry import policy_writes as tier_policy_writes

# Cluster-scoped objects a tier's rendering names but only the policy may write: per-pool
# StorageClasses and the replica-1 Ceph pool (a namespaced tier never triggers them).
POLICY_SCOPED_KINDS = frozenset({"StorageClass", "CephFilesystem"})


# Values covers compares as they are (bool is an int); checked before any Mapping, whose
# isinstance runs Python code (the ABC's hook): covers runs some hundred times a decision.
_LEAVES = (str, int, float, type(None))


def covers(current: Any, desired: Any) -> bool:
    """Whether `current` already holds everything `desired` sets (server-side apply would
    change nothing). Lists of objects match item by item in any order; other lists exactly."""
    if isinstance(desired, _LEAVES):
        return _same_leaf(current, desired)
    if isinstance(desired, list):
        if not isinstance(current, list):
            return False
        if all(isinstance(d, (dict, Mapping)) for d in desired):
            return all(_covered_item(current, d) for d in desired)
        return current == desired
    if isinstance(desired, (dict, Mapping)):
        if isinstance(current, list):
            return _by_index(desired) and all(
                int(k) < len(current) and covers(current[int(k)], v) for k, v in desired.items()
            )
        if not (isinstance(current, (dict, Mapping))):
            return False
        return all(k in current and covers(current[k], v) for k, v in desired.items())
    return _same_leaf(current, desired)


def _covered_item(current: list[Any], desired: Mapping[str, Any]) -> bool:
    """Whether an item of `current` covers `desired`, an item of a list of objects. A name
    that starts with a letter is no quantity, so only an item of the same name can cover it:
    the others are passed over without a look (lists of containers, env, volumes)."""
    name = desired.get("name")
    if isinstance(name, str) and name[:1].isalpha():
        return any(
            covers(c, desired)
            for c in current
            if not (isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"] != name)
        )
    return any(covers(c, desired) for c in current)


def _same_leaf(current: Any, desired: Any) -> bool:
    if isinstance(desired, (int, float)) and isinstance(current, (int, float)):
        return bool(current == desired)
    if bool(current == desired) or str(current) == str(desired):
        return True
    # Built-in kinds store a quantity in its canonical form (a Deployment's "278977527808"
    # comes back as "272438992Ki"): the same amount is the same value.
    return (
        isinstance(desired, str) and isinstance(current, str) and _same_quantity(current, desired)
    )


def _same_quantity(a: str, b: str) -> bool:
    try:
        return bool(parse_quantity(a) == parse_quantity(b))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError):
        return False


def _by_index(desired: Mapping[str, Any]) -> bool:
    """A JSON patch's expectation inside a list: its items by index (containers/1/args)."""
    return bool(desired) and all(str(k).isdigit() for k in desired)


def unkept_paths(current: Any, desired: Any, path: str = "") -> list[str]:
    """The paths of `desired` that `current` does not hold (what `covers` found missing)."""
    if isinstance(desired, Mapping) and isinstance(current, list) and _by_index(desired):
        missing: list[str] = []
        for key, value in desired.items():
            where = f"{path}[{key}]"
            i = int(key)
            missing += unkept_paths(current[i], value, where) if i < len(current) else [where]
        return missing
    if isinstance(desired, Mapping) and isinstance(current, Mapping):
        out: list[str] = []
        for key, value in desired.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in current:
                out.append(where)
            else:
                out += unkept_paths(current[key], value, where)
        return out
    if (
        isinstance(desired, list)
        and isinstance(current, list)
        and all(isinstance(d, Mapping) for d in desired)
    ):
        out = []
        for i, item in enumerate(desired):
            if any(covers(c, item) for c in current):
                continue
            key = next((k for k in ("name", "mountPath") if k in item), None)
            where = f"{path}[{item[key] if key else i}]"
            same = next(
                (c for c in current if key and isinstance(c, Mapping) and c.get(key) == item[key]),
                None,
            )
            out += [where] if same is None else unkept_paths(same, item, where)
        return out
    return [] if covers(current, desired) else [path or "."]


def expected_fields(write: DesiredWrite) -> dict[str, Any]:
    """What the object holds after `write` went through: the apply body (whichever version the
    object is read in: an LLMInferenceService written as v1alpha1 reads back as v1alpha2), or
    for a JSON patch the values its add and replace ops set, nested by the paths they end up
    at once every later op of the patch ran (a later remove or insert in the same list moves
    them: a take-back restores VLLM_ADDITIONAL_ARGS at env/2, then removes env/1 and env/0)."""
    if write.action != "Patch":
        return {k: v for k, v in write.body.items() if k != "apiVersion"}
    placed: list[tuple[list[str], Any]] = []
    for op in write.body.get("jsonPatch") or []:
        kind = op.get("op")
        keys = [k.replace("~1", "/").replace("~0", "~") for k in str(op["path"]).split("/")[1:]]
        if not keys:
            continue
        placed = [p for p in (_after_op(path, value, kind, keys) for path, value in placed) if p]
        if kind in ("add", "replace") and keys[-1] != "-":  # an append's index is unknown
            placed.append((keys, op["value"]))
    out: dict[str, Any] = {}
    for keys, value in placed:
        node = out
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return out


def _after_op(
    path: list[str], value: Any, kind: str | None, keys: list[str]
) -> tuple[list[str], Any] | None:
    """Where an earlier op's value is after a later op at `keys`; None when that op replaced
    or removed it, or changed inside it (nothing is then expected of it)."""
    if kind == "test":
        return path, value
    if kind not in ("add", "remove", "replace"):
        return None  # move, copy: kvtier sends none; expect nothing rather than guess
    n = len(keys)
    parent, last = keys[:-1], keys[-1]
    in_list = last.isdigit() and len(path) >= n and path[: n - 1] == parent
    inserted = kind == "add" and in_list  # into a list: what was at that index moves up
    shared = min(n, len(path))
    if path[:shared] == keys[:shared] and not inserted:
        return None  # the same place, above it or inside it
    if in_list and path[n - 1].isdigit():
        index = int(path[n - 1])
        if kind == "remove" and index > int(last):
            return [*parent, str(index - 1), *path[n:]], value
        if kind == "add" and index >= int(last):
            return [*parent, str(index + 1), *path[n:]], value
    return path, value


@dataclass(frozen=True)
class Unkept:
    """A write the API server answered without keeping all of it: the CRD's schema pruned or
    changed those fields. Writing it again would change nothing, so it is held back while
    the write is the same and the object's generation is the one that answer had."""

    fingerprint: str
    generation: int | None
    paths: tuple[str, ...]
    api_version: str = ""  # of the object: a new schema of its group may keep the write

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


# (kind, namespace, name, action) of one write.
UnkeptKey = tuple[str, str | None, str, str]


def write_fingerprint(write: DesiredWrite) -> str:
    text = json.dumps([write.action, write.body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _generation(obj: Mapping[str, Any] | None) -> int | None:
    value = ((obj or {}).get("metadata") or {}).get("generation")
    return value if isinstance(value, int) else None


def unkept_write(write: DesiredWrite, answer: Mapping[str, Any] | None) -> Unkept | None:
    """The write's fields the server's answer lacks, or None when it kept them all."""
    if write.action == "Delete" or not answer:
        return None
    expected = expected_fields(write)
    if covers(answer, expected):
        return None
    paths = unkept_paths(answer, expected)
    return Unkept(
        write_fingerprint(write), _generation(answer), tuple(paths[:5]), write.api_version
    )


def hold_unkept(
    writes: Sequence[DesiredWrite],
    unkept: Mapping[UnkeptKey, Unkept],
    observed: Mapping[tuple[str, str | None, str], Any],
) -> tuple[list[DesiredWrite], list[tuple[DesiredWrite, Unkept]]]:
    """(writes to send, writes held back): a write is held while it is the one the server
    did not keep and the object is still at that generation (nobody changed it since)."""
    send: list[DesiredWrite] = []
    held: list[tuple[DesiredWrite, Unkept]] = []
    for w in writes:
        key = (w.kind, w.namespace, w.name)
        seen = unkept.get((*key, w.action))
        if (
            seen is not None
            and seen.fingerprint == write_fingerprint(w)
            and seen.generation == _generation(observed.get(key))
        ):
            held.append((w, seen))
        else:
            send.append(w)
    return send, held


def schema_mismatch_verdict(held: Sequence[tuple[DesiredWrite, Unkept]]) -> Verdict:
    w, seen = held[0]
    where = f"{w.namespace}/{w.name}" if w.namespace else w.name
    return Verdict(
        ConditionType.APPLIED.value,
        FALSE,
        "SchemaMismatch",
        f"{w.kind} {where}: the API server did not keep {', '.join(seen.paths)} (the CRD's "
        "schema prunes or changes them); kvtier stops writing it until the object, the tier "
        "or the CRD changes",
    )


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
        if w.action == "Patch":  # rendered against what was read: only when it changes it
            if current is not None and w.body.get("jsonPatch"):
                needed.append(w)
        elif w.action == "Delete":
            if current is not None:
                needed.append(w)
        elif current is None:
            needed.append(w)
        elif not covers(current, expected_fields(w)):
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


def applied_verdict(
    target_writes: Sequence[DesiredWrite], target: Mapping[str, Any] | None
) -> Verdict:
    """Applied: the target holds every field of kvtier's apply, and no atomic-list patch is
    still due (one is rendered only while the target lacks kvtier's items)."""
    apply = next((w for w in target_writes if w.action == "Apply"), None)
    if apply is None or target is None:
        return Verdict(ConditionType.APPLIED.value, FALSE, "NotApplied", "no target patch")
    done = covers(target, expected_fields(apply))
    if done and not any(w.action == "Patch" for w in target_writes):
        return Verdict(
            ConditionType.APPLIED.value,
            TRUE,
            "Applied",
            f"{apply.kind} {apply.name} carries kvtier's offload configuration",
        )
    return Verdict(
        ConditionType.APPLIED.value,
        FALSE,
        "Applying",
        f"{apply.kind} {apply.name} does not carry the configuration yet",
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
    """The cluster-scoped objects only the KVCachePolicy triggers, each tier type's
    (kvtier.tiers): one no-provisioner StorageClass per mountPath NVMe pool (a
    storageClassName pool's class is its provisioner's), and the replica-1 CephFS pool with
    its class when enabled."""

    spec = KVCachePolicySpec.model_validate((policy or {}).get("spec") or {}) if policy else None
    return tier_policy_writes(spec, policy_settings(policy))


def policy_settings(policy: Mapping[str, Any] | None) -> EffectiveSettings:
    """The policy-sourced settings, which depend on no tier: evaluated against a bare spec
    (its target is the first registered kind; no setting reads the target)."""
    spec = KVCachePolicySpec.model_validate((policy or {}).get("spec") or {}) if policy else None
    bare = KVCacheTierSpec.model_validate(
        {
            "targetRef": {"kind": KINDS[0].kind, "name": "policy"},
            "workload": {"averageContextTokens": 1, "concurrentSessions": 1},
        }
    )
    return effective_settings(bare, spec)


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
            writes += unapply_writes(target)
    for obj in owned:
        kind, namespace, name = object_key(obj)
        meta = obj.get("metadata") or {}
        if kind == "PersistentVolume":
            keep = (meta.get("annotations") or {}).get(RETENTION) == "Retain"
        elif kind == "Deployment":  # an evictor: nothing of it outlives the tier
            keep = False
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
