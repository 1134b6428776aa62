"""The latest copy of every object reconcile reads, fed by the watches.

Reverse lookups answer "which tiers does this change concern?" so a change to a target,
ConfigMap, node or the policy wakes exactly the tiers that read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvtier.kube.wire import without_managed_fields
from kvtier.names.labels import MANAGED_BY, MANAGER, TIER_ID
from kvtier.names.objects import tier_id
from kvtier.names.records import configmap_record
from kvtier.render.picker_version import KSERVE_NAMESPACE, config_keys
from kvtier.render.scheduler import config_ref
from kvtier.targets.facts import without_unread_entries
from kvtier.targets.registry import api_versions, registered

TierKey = tuple[str, str]  # (namespace, name)
TargetKey = tuple[str, str, str]  # (kind, namespace, name)


def version_preference(kind: str) -> tuple[str, ...]:
    """The apiVersions of a target kind, preferred first (its registered versions): when a
    target is served in several, the first the cluster serves wins unless the tier's
    targetRef names one. () for a kind that is not registered."""
    found = registered(kind)
    return api_versions(found) if found is not None else ()


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def resource_version(obj: Mapping[str, Any]) -> int | None:
    try:
        return int(_meta(obj).get("resourceVersion") or "")
    except ValueError:
        return None


def is_news(obj: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Whether a watched object holds anything the cache does not. The echo of kvtier's own
    write does not (the cache took the write's response, and the reconcile that wrote it
    decided from it), nor does an event lagging behind it: waking the tier again for those
    would only repeat a decision."""
    if cached is None:
        return True
    new, old = resource_version(obj), resource_version(cached)
    return new is None or old is None or new > old


def node_facts(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of a node sizing depends on (heartbeats are not among them)."""
    status = node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return (
        tuple(sorted((_meta(node).get("labels") or {}).items())),
        tuple(sorted((status.get("allocatable") or {}).items())),
        bool((node.get("spec") or {}).get("unschedulable")),
        tuple(ready),
    )


# The phases of a PersistentVolume a decision tells apart (policy/provisioning.py: a bound one
# is not deleted to change its source; tiers/nvme.py: a released one is recycled); the others
# (Pending, Available, Failed) are all "not yet bound" to it.
_VOLUME_PHASES = frozenset({"Bound", "Released"})


def owned_facts(obj: Mapping[str, Any]) -> Any:
    """The parts of an owned object a decision depends on, where they are fewer than all of
    it: a PersistentVolume's metadata, spec and whether it is bound or released. The
    controller manager moving a new volume from Pending to Available changes none of them,
    so it wakes no tier. None for every other kind (any change is news)."""
    if obj.get("kind") != "PersistentVolume":
        return None
    meta = {k: v for k, v in _meta(obj).items() if k not in ("resourceVersion", "managedFields")}
    phase = (obj.get("status") or {}).get("phase")
    return (meta, obj.get("spec"), phase if phase in _VOLUME_PHASES else None)


# Distinct status.effective rows kept for sharing, at most (a row is a setting's path, value and
# source: the same few rows recur in every tier).
ROWS_KEPT = 4096


def share_rows(tier: dict[str, Any], rows: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """Let the tier's status.effective rows be the same objects as equal rows of other cached
    tiers (each tier's list is its own; its rows are only read): about a third of a cached
    tier's memory otherwise. `rows` is the table of rows seen, emptied when full."""
    status = tier.get("status")
    if not isinstance(status, dict) or not isinstance(effective := status.get("effective"), list):
        return
    if len(rows) > ROWS_KEPT:
        rows.clear()
    status["effective"] = [
        rows.setdefault(tuple(row.items()), row)
        if isinstance(row, dict) and all(isinstance(v, str) for v in row.values())
        else row
        for row in effective
    ]


@dataclass
class Cache:
    tiers: dict[TierKey, dict[str, Any]] = field(default_factory=dict)
    targets: dict[TargetKey, dict[str, dict[str, Any]]] = field(default_factory=dict)
    configmaps: dict[TierKey, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy: dict[str, Any] | None = None
    # For StorageClass NVMe pools: classes by name, CSIStorageCapacity by (namespace, name).
    storage_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    capacities: dict[TierKey, dict[str, Any]] = field(default_factory=dict)
    # Objects kvtier wrote for a tier, by tier id label: {(kind, ns, name): object}.
    owned: dict[str, dict[tuple[str, str | None, str], dict[str, Any]]] = field(
        default_factory=dict
    )

    # kind → API versions the cluster serves for it (from discovery at start).
    served: dict[str, set[str]] = field(default_factory=dict)
    # kind → the one version a watch feeds, for kinds served in several (each version is a
    # view of the same object, so one watch sees every change). A kind not here is watched
    # in every version.
    watched: dict[str, str] = field(default_factory=dict)
    # Reverse indexes, so a change wakes its tiers without scanning them all.
    _by_target: dict[TargetKey, set[TierKey]] = field(default_factory=dict)
    _by_configmap: dict[TierKey, set[TierKey]] = field(default_factory=dict)
    _by_id: dict[str, TierKey] = field(default_factory=dict)
    _refs: dict[TierKey, tuple[TargetKey, TierKey | None]] = field(default_factory=dict)
    # Scheduler ConfigMaps: (namespace, name) → the targets whose config.ref names it, the
    # ConfigMap each target names, and tier id → the ConfigMaps carrying that tier's record.
    _by_scheduler_configmap: dict[TierKey, set[TargetKey]] = field(default_factory=dict)
    _scheduler_configmap_of: dict[TargetKey, TierKey] = field(default_factory=dict)
    _scheduler_records: dict[str, set[TierKey]] = field(default_factory=dict)
    # LLMInferenceServiceConfigs by (namespace, name), every one (they are few), and which
    # targets may take their endpoint picker's version from each (render/picker_version.py).
    llmisvc_configs: dict[TierKey, dict[str, Any]] = field(default_factory=dict)
    kserve_namespace: str = KSERVE_NAMESPACE
    _by_llmisvc_config: dict[TierKey, set[TargetKey]] = field(default_factory=dict)
    _llmisvc_configs_of: dict[TargetKey, list[TierKey]] = field(default_factory=dict)
    # Equal status.effective rows of the cached tiers, one object each (share_rows).
    _rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    # Objects of the kinds the target kinds read (Kind.reads), by (kind, namespace, name).
    related: dict[TargetKey, dict[str, Any]] = field(default_factory=dict)
    # Targets kvtier applied to: the resourceVersion it read before the apply and the one
    # the apply answered with. A change another made in between is in that answer, though
    # the decision from the answer may have reused what was worked out from the version read
    # (policy/answers.py): the change's own watch event, older than the answer, wakes the
    # tier again (written_over) until the answer's echo closes the window.
    _applied_over: dict[TargetKey, tuple[int, int]] = field(default_factory=dict)

    def note_applied(self, key: TargetKey, read: str | None, answered: str | None) -> None:
        try:
            self._applied_over[key] = (int(read or ""), int(answered or ""))
        except ValueError:
            self._applied_over.pop(key, None)

    def written_over(self, key: TargetKey, obj: Mapping[str, Any]) -> bool:
        """Whether a target's watch event is a change made by another between kvtier's read
        and its apply (the apply's answer holds it, the render may not have)."""
        window = self._applied_over.get(key)
        version = resource_version(obj)
        if window is None or version is None:
            return False
        if version >= window[1]:  # the answer's echo or later: every change before it is in
            del self._applied_over[key]
            return False
        return window[0] < version

    def set_related(self, obj: dict[str, Any], deleted: bool) -> None:
        meta = _meta(obj)
        key = (str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name")))
        if deleted:
            self.related.pop(key, None)
        else:
            self.related[key] = obj

    def related_for(self, target: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
        """The objects of the kinds the target's kind reads (of its namespace, for namespaced
        kinds); None when its kind reads none, or the cluster serves none of them."""
        kind = registered(str(target.get("kind"))) if target is not None else None
        if target is None or kind is None or not kind.reads:
            return None
        reads = {r.kind: r.namespaced for r in kind.reads}
        # Discovery runs at start; a kind whose CRD came later shows by its objects.
        if not any(k in self.served for k in reads) and not any(
            k in reads for k, _, _ in self.related
        ):
            return None
        namespace = str(_meta(target).get("namespace") or "")
        return [
            obj
            for (k, ns, _), obj in sorted(self.related.items())
            if k in reads and (not reads[k] or ns == namespace)
        ]

    def tiers_for_related(self, kind: str, namespace: str) -> list[TierKey]:
        """The tiers whose target's kind reads `kind` (in `namespace`, for a namespaced
        kind): a runtime's change may change the pod KServe builds for any of them."""
        found: set[TierKey] = set()
        for (target_kind, target_ns, _), tiers in self._by_target.items():
            known = registered(target_kind)
            reads = {r.kind: r.namespaced for r in known.reads} if known is not None else {}
            if kind in reads and (not reads[kind] or target_ns == namespace):
                found |= tiers
        return sorted(found)

    def set_tier(self, key: TierKey, tier: dict[str, Any]) -> None:
        self.pop_tier(key, keep_object=True)
        self.tiers[key] = without_managed_fields(tier)
        share_rows(tier, self._rows)
        spec = tier.get("spec") or {}
        ref = spec.get("targetRef") or {}
        target = (str(ref.get("kind", "")), key[0], str(ref.get("name", "")))
        cm_ref = (spec.get("model") or {}).get("configMapRef")
        config_map = (key[0], str(cm_ref.get("name", ""))) if cm_ref else None
        self._by_target.setdefault(target, set()).add(key)
        if config_map is not None:
            self._by_configmap.setdefault(config_map, set()).add(key)
        self._by_id[tier_id(*key)] = key
        self._refs[key] = (target, config_map)

    def pop_tier(self, key: TierKey, keep_object: bool = False) -> None:
        if not keep_object:
            self.tiers.pop(key, None)
            self._by_id.pop(tier_id(*key), None)
        refs = self._refs.pop(key, None)
        if refs is None:
            return
        target, config_map = refs
        self._by_target.get(target, set()).discard(key)
        if config_map is not None:
            self._by_configmap.get(config_map, set()).discard(key)

    def tier_keys(self) -> list[TierKey]:
        return list(self.tiers)

    def tiers_for_target(self, kind: str, namespace: str, name: str) -> list[TierKey]:
        return sorted(self._by_target.get((kind, namespace, name), ()))

    def tiers_for_configmap(self, namespace: str, name: str) -> list[TierKey]:
        return sorted(self._by_configmap.get((namespace, name), ()))

    def set_target(self, key: TargetKey, api_version: str, obj: dict[str, Any]) -> None:
        self.targets.setdefault(key, {})[api_version] = without_unread_entries(obj)
        self._unindex_scheduler_ref(key)
        ref = config_ref(obj)
        if ref is not None:
            configmap = (key[1], ref[0])
            self._scheduler_configmap_of[key] = configmap
            self._by_scheduler_configmap.setdefault(configmap, set()).add(key)
        kind = registered(key[0])
        if kind is not None and kind.reads_picker_configs:
            configs = config_keys(obj, self.kserve_namespace)
            self._llmisvc_configs_of[key] = configs
            for config in configs:
                self._by_llmisvc_config.setdefault(config, set()).add(key)

    def forget_target(self, key: TargetKey) -> None:
        """The object is gone, and with it every version's view of it."""
        self.targets.pop(key, None)
        self._applied_over.pop(key, None)
        self._unindex_scheduler_ref(key)

    def _unindex_scheduler_ref(self, key: TargetKey) -> None:
        configmap = self._scheduler_configmap_of.pop(key, None)
        if configmap is not None:
            self._by_scheduler_configmap.get(configmap, set()).discard(key)
        for config in self._llmisvc_configs_of.pop(key, []):
            self._by_llmisvc_config.get(config, set()).discard(key)

    def set_llmisvc_config(self, obj: dict[str, Any], deleted: bool) -> None:
        meta = _meta(obj)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if deleted:
            self.llmisvc_configs.pop(key, None)
        else:
            self.llmisvc_configs[key] = obj

    def tiers_for_llmisvc_config(self, namespace: str, name: str) -> list[TierKey]:
        """Tiers whose target may take its endpoint picker's version from this config."""
        tiers: set[TierKey] = set()
        for target in self._by_llmisvc_config.get((namespace, name), ()):
            tiers.update(self.tiers_for_target(*target))
        return sorted(tiers)

    def llmisvc_configs_for(self, target: Mapping[str, Any]) -> dict[TierKey, dict[str, Any]]:
        """The cached LLMInferenceServiceConfigs the target's picker version may come from."""
        keys = config_keys(target, self.kserve_namespace)
        return {k: self.llmisvc_configs[k] for k in keys if k in self.llmisvc_configs}

    def tiers_for_scheduler_configmap(self, namespace: str, name: str) -> list[TierKey]:
        """Tiers whose target's scheduler config is in this ConfigMap, or that left their
        record on it."""
        tiers: set[TierKey] = set()
        for target in self._by_scheduler_configmap.get((namespace, name), ()):
            tiers.update(self.tiers_for_target(*target))
        for tid, configmaps in self._scheduler_records.items():
            if (namespace, name) in configmaps and tid in self._by_id:
                tiers.add(self._by_id[tid])
        return sorted(tiers)

    def set_configmap(self, obj: dict[str, Any], deleted: bool) -> None:
        """Keep a ConfigMap a tier reads (or that carries a tier's scheduler record)."""
        meta = _meta(obj)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        for configmaps in self._scheduler_records.values():
            configmaps.discard(key)
        if deleted:
            self.configmaps.pop(key, None)
            return
        record = configmap_record(obj)
        if record is not None and isinstance(record.get("tier"), str):
            self._scheduler_records.setdefault(record["tier"], set()).add(key)
        self.configmaps[key] = without_managed_fields(obj)

    def scheduler_configmaps(self, key: TierKey) -> dict[TierKey, dict[str, Any]]:
        """The cached ConfigMaps carrying this tier's scheduler record."""
        names = self._scheduler_records.get(tier_id(*key), set())
        return {n: self.configmaps[n] for n in sorted(names) if n in self.configmaps}

    def forget_view(self, key: TargetKey, api_version: str) -> None:
        """One version's view is gone (no longer served); the object may still exist."""
        self.targets.get(key, {}).pop(api_version, None)

    def unwatched_version(self, tier: Mapping[str, Any]) -> str | None:
        """The version the tier reads when no watch feeds that version and its cached view is
        missing or older than the watched one: it has to be read (GET) before deciding."""
        ref = (tier.get("spec") or {}).get("targetRef") or {}
        kind = str(ref.get("kind", ""))
        wanted = ref.get("apiVersion")
        fed = self.watched.get(kind)
        if not wanted or fed is None or wanted == fed:
            return None
        versions = self.targets.get((kind, _meta(tier).get("namespace", ""), ref.get("name", "")))
        if not versions or fed not in versions:
            return None  # the object does not exist (as far as the watch knows)
        view = versions.get(wanted)
        if view is not None and resource_version(view) == resource_version(versions[fed]):
            return None
        return str(wanted)

    def target_for(self, tier: Mapping[str, Any]) -> dict[str, Any] | None:
        """The target as the version the tier names, else the newest version the cluster
        serves for its kind. Never whichever view's event came first: the version decides
        how kvtier patches (native field or vLLM arguments)."""
        ref = (tier.get("spec") or {}).get("targetRef") or {}
        kind = str(ref.get("kind", ""))
        key = (kind, _meta(tier).get("namespace", ""), ref.get("name", ""))
        versions = self.targets.get(key) or {}
        wanted = ref.get("apiVersion") or self.preferred_version(kind)
        if wanted is not None:
            return versions.get(wanted)
        return next((versions[v] for v in version_preference(kind) if v in versions), None)

    def preferred_version(self, kind: str) -> str | None:
        """The preferred kvtier-known version served for `kind` (None until discovery ran)."""
        served = self.served.get(kind)
        if not served:
            return None
        return next((v for v in version_preference(kind) if v in served), None)

    def configmap_for(self, tier: Mapping[str, Any]) -> dict[str, Any] | None:
        ref = ((tier.get("spec") or {}).get("model") or {}).get("configMapRef")
        if not ref:
            return None
        return self.configmaps.get((_meta(tier).get("namespace", ""), ref.get("name", "")))

    def owned_for(
        self, namespace: str, name: str
    ) -> dict[tuple[str, str | None, str], dict[str, Any]]:
        return dict(self.owned.get(tier_id(namespace, name), {}))

    def owned_copy(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The cached copy of an object kvtier owns (matched by tier id label, kind, name)."""
        meta = _meta(obj)
        tid = (meta.get("labels") or {}).get(TIER_ID)
        key = (str(obj.get("kind")), meta.get("namespace"), str(meta.get("name")))
        return self.owned.get(tid, {}).get(key) if tid else None

    def owner(self, obj: Mapping[str, Any]) -> TierKey | None:
        """The tier an object carrying a tier id label belongs to, if that tier exists."""
        tid = (_meta(obj).get("labels") or {}).get(TIER_ID)
        return self._by_id.get(tid) if tid else None

    def set_owned(self, obj: dict[str, Any], deleted: bool) -> TierKey | None:
        """Track an object carrying a tier id label; returns the tier it belongs to."""
        meta = _meta(obj)
        tid = (meta.get("labels") or {}).get(TIER_ID)
        if not tid:
            return None
        key = (str(obj.get("kind")), meta.get("namespace"), str(meta.get("name")))
        objects = self.owned.setdefault(tid, {})
        if deleted:
            objects.pop(key, None)
        else:
            objects[key] = without_managed_fields(obj)
        return self._by_id.get(tid)

    def remember_written(self, obj: dict[str, Any]) -> None:
        """An object the operator just wrote, as the API returned it (fresher than the watch)."""
        meta = _meta(obj)
        kind = str(obj.get("kind"))
        own = (meta.get("labels") or {}).get(MANAGED_BY) == MANAGER
        if registered(kind) is not None and not own:  # a target (never kvtier's own evictor)
            key = (kind, meta.get("namespace", ""), meta.get("name", ""))
            # Versions served without conversion are one object: refresh every cached view.
            for version in {*self.targets.get(key, {}), str(obj.get("apiVersion"))}:
                self.set_target(key, version, {**obj, "apiVersion": version})
        elif kind == "ConfigMap":  # a scheduler config kvtier patched
            self.set_configmap(obj, deleted=False)
        else:
            self.set_owned(obj, deleted=False)

    def forget_written(self, kind: str, namespace: str | None, name: str) -> None:
        for objects in self.owned.values():
            objects.pop((kind, namespace, name), None)

    def set_node(self, node: dict[str, Any]) -> bool:
        """Store a node; True when a fact sizing depends on changed."""
        name = str(_meta(node).get("name"))
        before = self.nodes.get(name)
        self.nodes[name] = node
        return before is None or node_facts(before) != node_facts(node)
