"""Labels and owner references that let the operator find, and clean up, what it wrote."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvtier.names import API_VERSION
from kvtier.names.objects import tier_id

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "kvtier"
TIER_NAMESPACE = "kvcache.io/tier-namespace"
TIER_NAME = "kvcache.io/tier-name"
TIER_ID = "kvcache.io/tier-id"
NVME_POOL = "kvcache.io/nvme-pool"
PROBE_TIER = "kvcache.io/probe-tier"  # on a storage-probe Job: the tier it measures
# Annotation on a PersistentVolume: whether the operator deletes it with its tier (the PV's
# own reclaim policy is always Retain, see nvme.py).
RETENTION = "kvcache.io/retention"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class TierRef:
    """The KVCacheTier the objects belong to; uid is None in Plan mode before creation."""

    namespace: str
    name: str
    uid: str | None = None

    @property
    def id(self) -> str:
        return tier_id(self.namespace, self.name)


def managed_labels() -> dict[str, str]:
    """Labels on every object kvtier writes, shared ones (StorageClasses) included."""
    return {MANAGED_BY: MANAGER}


def tier_labels(tier: TierRef) -> dict[str, str]:
    """Labels of an object owned by one tier. The name label is left out when the tier name
    is no valid label value (over 63 characters); the id label always identifies the tier."""
    labels = {**managed_labels(), TIER_NAMESPACE: tier.namespace, TIER_ID: tier.id}
    if len(tier.name) <= 63 and _LABEL_VALUE.match(tier.name):
        labels[TIER_NAME] = tier.name
    return labels


def tier_selector(tier: TierRef) -> dict[str, str]:
    """Label selector matching exactly the objects of one tier."""
    return {TIER_ID: tier.id}


def owner_references(tier: TierRef) -> list[dict[str, Any]]:
    """Owner reference to the KVCacheTier for namespaced objects; none without a uid."""
    if tier.uid is None:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "KVCacheTier",
            "name": tier.name,
            "uid": tier.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
