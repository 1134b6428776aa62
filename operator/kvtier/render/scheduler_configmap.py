"""The router's CPU-tier scorer when its config is in a ConfigMap (`config.ref`, KServe v0.20).

KServe reads the key (`epp` by default) of the ConfigMap `config.ref` names in the
LLMInferenceService's own namespace, passes its text to the endpoint picker as
`--config-text`, and rolls the picker's Deployment when the text changes (the picker reads
its config only at start-up). kvtier writes only a ConfigMap of the target's own namespace,
only where the platform team granted it (chart value `schedulerConfigMaps.namespaces`), and
never one in KServe's namespace (KServe's fallback for `config-scheduler-*` names).

The same `config_sync` as for an inline config gives the scorer's parameters; the key's text
keeps everything else the user wrote (render/scheduler_text.py). One JSON patch sets the text
and kvtier's record of the user's values (annotation `kvcache.io/scheduler`, with the tier's
id and the key), guarded by a `test` of the exact text read: a concurrent edit makes it fail,
and the next reconcile starts from the new text. Taking the tier back puts the user's values
back where the text still holds kvtier's, and removes the record, in one patch guarded the
same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kvtier.names.records import SCHEDULER_RECORD as RECORD_ANNOTATION
from kvtier.names.records import configmap_record
from kvtier.render.result import DesiredWrite
from kvtier.render.scheduler import (
    AUTO_TUNE,
    CAPACITY,
    CONFIG_REF_REASON,
    CPU_SCORER,
    DEFAULT_BLOCK_TOKENS,
    UNKNOWN_CONFIG_REASON,
    SchedulerProblem,
    SchedulerSync,
    config_ref,
    config_sync,
    ref_capacity,
    restore_plugins,
)
from kvtier.render.scheduler_text import edit_parameters, load_config
from kvtier.targets.offload import RoleOffload

SHARED_REASON = "SchedulerConfigShared"
GRANT_VALUE = "schedulerConfigMaps.namespaces"  # the chart value that grants the write


def _pointer(*path: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def value_to_set(roles: Sequence[RoleOffload]) -> str:
    """The hand-set values for a config kvtier does not write."""
    count = ref_capacity(roles)
    return (
        f"if it has a {CPU_SCORER}, set its {AUTO_TUNE}: false and {CAPACITY}: {count} "
        f"(blocks of {DEFAULT_BLOCK_TOKENS} tokens; scale by 16 / blockSizeTokens if it sets "
        "another)"
    )


def configmap_sync(
    target: Mapping[str, Any],
    configmap: Mapping[str, Any] | None,
    roles: Sequence[RoleOffload],
    tier_id: str,
    layout: bool | SchedulerProblem,
) -> SchedulerSync | SchedulerProblem | None:
    """The CPU scorer in step with the tier for a config in a ConfigMap (`configmap`: the
    one config.ref names in the target's namespace, None when there is none), a problem, or
    None when the target's config is not in a ConfigMap or enables no CPU-tier scorer.
    `layout`: as for scheduler_sync."""
    ref = config_ref(target)
    if ref is None or ref_capacity(roles) is None:
        return None
    name, key = ref
    where = f"spec.router.scheduler.config.ref: ConfigMap {name}"
    if configmap is None:
        return SchedulerProblem(
            CONFIG_REF_REASON,
            f"{where} is not in the LLMInferenceService's namespace (kvtier writes no other: "
            f"KServe's own namespace holds only its config-scheduler-* presets); "
            f"{value_to_set(roles)}",
        )
    text = (configmap.get("data") or {}).get(key)
    if not isinstance(text, str):
        return SchedulerProblem(
            CONFIG_REF_REASON, f"{where} has no key {key} (KServe cannot resolve the ref either)"
        )
    config = load_config(text)
    if not isinstance(config, Mapping):
        return SchedulerProblem(
            UNKNOWN_CONFIG_REASON,
            f"{where} key {key} is not one YAML document holding a map; kvtier leaves it alone",
        )
    record = configmap_record(configmap) or {}
    if record and record.get("tier") != tier_id:
        return SchedulerProblem(
            SHARED_REASON,
            f"{where} already holds the CPU-tier capacity of another KVCacheTier (its record "
            f"{RECORD_ANNOTATION}): one ConfigMap cannot follow two tiers; give each "
            "LLMInferenceService a scheduler ConfigMap of its own",
        )
    own = record if record.get("key") == key else {}
    sync = config_sync(config, roles, own, f"ConfigMap {name} key {key}", layout)
    return replace(sync, configmap=ref) if isinstance(sync, SchedulerSync) else sync


def _scorer_parameters(plugins: Sequence[Any], plugin: str) -> dict[str, Any] | None:
    for item in plugins:
        if isinstance(item, Mapping) and item.get("name") == plugin:
            params = item.get("parameters")
            return dict(params) if isinstance(params, Mapping) else None
    return None


def configmap_holds(configmap: Mapping[str, Any] | None, sync: SchedulerSync) -> bool:
    """Whether the ConfigMap's key already gives the scorer kvtier's parameters."""
    if configmap is None or sync.configmap is None:
        return False
    text = (configmap.get("data") or {}).get(sync.configmap[1])
    config = load_config(text) if isinstance(text, str) else None
    plugins = config.get("plugins") if isinstance(config, Mapping) else None
    if not isinstance(plugins, list):
        return False
    want = _scorer_parameters(sync.plugins, sync.plugin)
    return _scorer_parameters(plugins, sync.plugin) == want


def _annotation_ops(configmap: Mapping[str, Any], value: str | None) -> list[dict[str, Any]]:
    """Ops that set kvtier's record to `value` (None: remove it)."""
    annotations = _meta(configmap).get("annotations")
    current = (annotations or {}).get(RECORD_ANNOTATION)
    path = _pointer("metadata", "annotations", RECORD_ANNOTATION)
    if value is None:
        if current is None:
            return []
        if set(annotations or {}) == {RECORD_ANNOTATION}:  # kvtier made the map: it goes
            path = "/metadata/annotations"
            current = annotations
        return [{"op": "test", "path": path, "value": current}, {"op": "remove", "path": path}]
    if not isinstance(annotations, Mapping):
        return [{"op": "add", "path": "/metadata/annotations", "value": {RECORD_ANNOTATION: value}}]
    return [{"op": "add", "path": path, "value": value}]


def _write(configmap: Mapping[str, Any], ops: list[dict[str, Any]], summary: str) -> DesiredWrite:
    meta = _meta(configmap)
    return DesiredWrite(
        "Patch",
        "v1",
        "ConfigMap",
        str(meta.get("name")),
        str(meta.get("namespace")),
        {"jsonPatch": ops},
        summary,
    )


def configmap_writes(
    configmap: Mapping[str, Any], sync: SchedulerSync, tier_id: str
) -> list[DesiredWrite]:
    """The JSON patch that gives the ConfigMap's key kvtier's scorer parameters and records
    the user's values; [] when the text already holds them."""
    if sync.configmap is None:
        return []
    name, key = sync.configmap
    text = (configmap.get("data") or {}).get(key)
    params = _scorer_parameters(sync.plugins, sync.plugin)
    if not isinstance(text, str) or params is None:
        return []
    if (configmap_record(configmap) or {}).get("key", key) != key:
        return []  # the record of another key goes back first (policy/scheduler.py)
    new_text = edit_parameters(text, sync.plugin, params)
    if new_text == text:
        return []
    record = json.dumps(
        {"tier": tier_id, "key": key, **sync.record}, separators=(",", ":"), sort_keys=True
    )
    data = _pointer("data", key)
    ops = [
        {"op": "test", "path": data, "value": text},
        {"op": "replace", "path": data, "value": new_text},
        *_annotation_ops(configmap, record),
    ]
    summary = (
        f"ConfigMap {name} key {key}: scheduler plugin {sync.plugin} {CAPACITY} {sync.capacity} "
        f"(blocks of {sync.block_size_tokens} tokens), {AUTO_TUNE} false; the rest of the "
        "text as the user wrote it"
    )
    return [_write(configmap, ops, summary)]


def configmap_restore_writes(configmap: Mapping[str, Any], tier_id: str) -> list[DesiredWrite]:
    """The JSON patch that gives the user's scorer values back where the text still holds
    kvtier's, and removes kvtier's record; [] when the ConfigMap carries no record of this
    tier."""
    record = configmap_record(configmap)
    if record is None or record.get("tier") != tier_id:
        return []
    key = str(record.get("key") or "")
    plugin = str(record.get("plugin") or CPU_SCORER)
    text = (configmap.get("data") or {}).get(key)
    config = load_config(text) if isinstance(text, str) else None
    plugins = config.get("plugins") if isinstance(config, Mapping) else None
    ops: list[dict[str, Any]] = []
    restored = restore_plugins(plugins, record) if isinstance(plugins, list) else None
    if restored is not None and isinstance(text, str):
        new_text = edit_parameters(text, plugin, _scorer_parameters(restored, plugin))
        if new_text != text:
            data = _pointer("data", key)
            ops += [
                {"op": "test", "path": data, "value": text},
                {"op": "replace", "path": data, "value": new_text},
            ]
    ops += _annotation_ops(configmap, None)
    name = _meta(configmap).get("name")
    return [_write(configmap, ops, f"ConfigMap {name} key {key}: the user's scorer values back")]
