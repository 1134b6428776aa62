"""The latest copy of every object reconcile reads, fed by the watches.

Reverse lookups answer "which tiers does this change concern?" so a change to a target,
ConfigMap, node or the policy wakes exactly the tiers that read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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

    def set_node(self, node: dict[str, Any]) -> bool:
        """Store a node; True when a fact sizing depends on changed."""
        name = str(_meta(node).get("name"))
        before = self.nodes.get(name)
        self.nodes[name] = node
        return before is None or node_facts(before) != node_facts(node)
