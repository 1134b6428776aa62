"""SchedulerSynced, and which scheduler ConfigMaps kvtier writes or gives back for a tier.

A config in a ConfigMap is written only where the operator may patch ConfigMaps (the platform
team opts the namespace in; a 403 says it did not), and a ConfigMap the target no longer
names (its `config.ref` moved, or went inline) gets the user's values back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kvtier.api.tier import ConditionType
from kvtier.names.records import configmap_record
from kvtier.policy.conditions import FALSE, TRUE, Verdict
from kvtier.render import DesiredWrite
from kvtier.render.scheduler import (
    CONFIG_REF_REASON,
    PLUGINS_PATH,
    SchedulerProblem,
    SchedulerSync,
    config_ref,
)
from kvtier.render.scheduler_configmap import (
    GRANT_VALUE,
    configmap_holds,
    configmap_restore_writes,
    value_to_set,
)
from kvtier.targets.offload import RoleOffload

Scheduler = SchedulerSync | SchedulerProblem | None


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def referenced_configmap(
    target: Mapping[str, Any] | None, configmaps: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The ConfigMap the target's `config.ref` names, among those read in its namespace."""
    ref = config_ref(target) if target is not None else None
    if ref is None:
        return None
    return next((c for c in configmaps if _name(c) == ref[0]), None)


def forbidden_problem(
    sync: SchedulerSync, namespace: str, roles: Sequence[RoleOffload]
) -> SchedulerProblem:
    """The operator may not patch ConfigMaps in the namespace: the values to set by hand, and
    how the platform team grants the write."""
    name = sync.configmap[0] if sync.configmap else ""
    return SchedulerProblem(
        CONFIG_REF_REASON,
        f"spec.router.scheduler.config.ref: kvtier may not patch ConfigMap {name} in namespace "
        f"{namespace} (403); {value_to_set(roles)}, or have the platform team add {namespace} "
        f"to the chart value {GRANT_VALUE} (a Role that lets kvtier get and patch ConfigMaps "
        "there)",
    )


def configmap_step(
    scheduler: Scheduler,
    writes: Sequence[DesiredWrite],
    configmaps: Sequence[Mapping[str, Any]],
    tier_id: str,
    namespace: str,
    forbidden: Collection[str],
    roles: Sequence[RoleOffload],
) -> tuple[Scheduler, list[DesiredWrite]]:
    """The scheduler outcome and the writes once the ConfigMap rights are known: no write
    to a ConfigMap kvtier may not patch (`forbidden`: names that answered 403), and the
    user's values back in every ConfigMap of this tier's record that kvtier no longer keeps
    in step (the target's `config.ref` moved to another ConfigMap or key, or went inline)."""
    out = list(writes)
    held = scheduler.configmap if isinstance(scheduler, SchedulerSync) else None
    if isinstance(scheduler, SchedulerSync) and held is not None and held[0] in forbidden:
        out = [w for w in out if not _is_configmap(w, held[0])]
        scheduler = forbidden_problem(scheduler, namespace, roles)
    kept = scheduler.configmap if isinstance(scheduler, SchedulerSync) else None
    for configmap in configmaps:
        record = configmap_record(configmap) or {}
        if record.get("tier") != tier_id or _name(configmap) in forbidden:
            continue
        if kept != (_name(configmap), record.get("key")):
            out += configmap_restore_writes(configmap, tier_id)
    return scheduler, out


def removal_configmap_writes(
    configmaps: Sequence[Mapping[str, Any]], tier_id: str
) -> list[DesiredWrite]:
    """Taking a tier back: the user's values back in every ConfigMap of its record."""
    return [w for c in configmaps for w in configmap_restore_writes(c, tier_id)]


def _is_configmap(write: DesiredWrite, name: str) -> bool:
    return write.kind == "ConfigMap" and write.name == name


def scheduler_verdict(
    sync: Scheduler, target: Mapping[str, Any] | None, configmap: Mapping[str, Any] | None
) -> Verdict | None:
    """SchedulerSynced: the router's CPU-tier prefix scorer holds the tier's block count, or
    why kvtier does not write it. Never blocks Ready: the tier works either way."""
    if sync is None:
        return None
    kind = ConditionType.SCHEDULER_SYNCED.value
    if isinstance(sync, SchedulerProblem):
        return Verdict(kind, FALSE, sync.reason, sync.message)
    what = (
        f"scheduler plugin {sync.plugin}: lruCapacityPerServer {sync.capacity} blocks of "
        f"{sync.block_size_tokens} tokens ({', '.join(sync.roles)}), autoTune false"
    )
    if sync.configmap is not None:
        name, key = sync.configmap
        what = (
            f"ConfigMap {name} key {key}: {what} (KServe passes the text to the endpoint "
            "picker, which reads it at start-up, and rolls its Deployment when it changes)"
        )
        done = configmap_holds(configmap, sync)
    else:
        current: Any = target
        for key in PLUGINS_PATH:
            current = current.get(key) if isinstance(current, Mapping) else None
        done = current == sync.plugins
    if not done:
        return Verdict(kind, FALSE, "SchedulerSyncing", f"{what}: not written yet")
    return Verdict(kind, TRUE, "SchedulerSynced", what)
