"""The latest copy of every object reconcile reads, fed by the watches.

Reverse lookups answer "which tiers does this change concern?" so a change to a target,
ConfigMap, node or the policy wakes exactly the tiers that read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvtier.render.labels import TIER_ID
from kvtier.render.naming import tier_id

TierKey = tuple[str, str]  # (namespace, name)
TargetKey = tuple[str, str, str]  # (kind, namespace, name)
# When a target is served in several versions, the newest that kvtier knows wins unless the
# tier's targetRef names one.
VERSION_PREFERENCE = (
    "serving.kserve.io/v1beta1",
    "serving.kserve.io/v1alpha2",
    "serving.kserve.io/v1alpha1",
)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


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


@dataclass
class Cache:
    tiers: dict[TierKey, dict[str, Any]] = field(default_factory=dict)
    targets: dict[TargetKey, dict[str, dict[str, Any]]] = field(default_factory=dict)
    configmaps: dict[TierKey, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy: dict[str, Any] | None = None
    # Objects kvtier wrote for a tier, by tier id label: {(kind, ns, name): object}.
    owned: dict[str, dict[tuple[str, str | None, str], dict[str, Any]]] = field(
        default_factory=dict
    )

    def tier_keys(self) -> list[TierKey]:
        return list(self.tiers)

    def tiers_for_target(self, kind: str, namespace: str, name: str) -> list[TierKey]:
        return [
            key
            for key, tier in self.tiers.items()
            if key[0] == namespace
            and (ref := (tier.get("spec") or {}).get("targetRef") or {}).get("kind") == kind
            and ref.get("name") == name
        ]

    def tiers_for_configmap(self, namespace: str, name: str) -> list[TierKey]:
        return [
            key
            for key, tier in self.tiers.items()
            if key[0] == namespace
            and (((tier.get("spec") or {}).get("model") or {}).get("configMapRef") or {}).get(
                "name"
            )
            == name
        ]

    def set_target(self, key: TargetKey, api_version: str, obj: dict[str, Any]) -> None:
        self.targets.setdefault(key, {})[api_version] = obj

    def forget_target(self, key: TargetKey, api_version: str) -> None:
        versions = self.targets.get(key, {})
        versions.pop(api_version, None)
        if not versions:
            self.targets.pop(key, None)

    def target_for(self, tier: Mapping[str, Any]) -> dict[str, Any] | None:
        ref = (tier.get("spec") or {}).get("targetRef") or {}
        key = (ref.get("kind", ""), _meta(tier).get("namespace", ""), ref.get("name", ""))
        versions = self.targets.get(key) or {}
        for version in (ref.get("apiVersion"), *VERSION_PREFERENCE):
            if version in versions:
                return versions[version]
        return next(iter(versions.values()), None)

    def configmap_for(self, tier: Mapping[str, Any]) -> dict[str, Any] | None:
        ref = ((tier.get("spec") or {}).get("model") or {}).get("configMapRef")
        if not ref:
            return None
        return self.configmaps.get((_meta(tier).get("namespace", ""), ref.get("name", "")))

    def owned_for(
        self, namespace: str, name: str
    ) -> dict[tuple[str, str | None, str], dict[str, Any]]:
        return dict(self.owned.get(tier_id(namespace, name), {}))

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
            objects[key] = obj
        return next(
            (k for k in self.tiers if tier_id(*k) == tid),
            None,
        )

    def set_node(self, node: dict[str, Any]) -> bool:
        """Store a node; True when a fact sizing depends on changed."""
        name = str(_meta(node).get("name"))
        before = self.nodes.get(name)
        self.nodes[name] = node
        return before is None or node_facts(before) != node_facts(node)
