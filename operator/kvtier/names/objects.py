"""Deterministic, valid and collision-free names for the objects kvtier writes.

Names built by joining parts with dashes are ambiguous ("a-b"+"c" and "a"+"b-c" give the same
text), so every name built from user-chosen parts ends in a short sha256 digest of the exact
parts. The readable prefix is cut to fit the kind's length limit; the digest keeps it unique.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

PREFIX = "kvtier"
DNS_LABEL_MAX = 63  # Volume names, label values, Service names
DNS_SUBDOMAIN_MAX = 253  # PersistentVolume, PersistentVolumeClaim, StorageClass names
HASH_HEX = 8

# Volume names inside the model-server pod (DNS labels): fixed, one of each per pod.
DSHM_VOLUME = "kvtier-dshm"
KV_CACHE_VOLUME = "kvtier-kv-cache"
# kvtier's evictor: its container (a sidecar in the model-server pod, or its own
# Deployment's) and the port of its metrics, which the observer scrapes.
EVICTOR_CONTAINER = "kvtier-evictor"
EVICTOR_METRICS_PORT = 9466

_INVALID = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")


def short_hash(*parts: str, length: int = HASH_HEX) -> str:
    """Hex sha256 prefix of the parts, NUL-separated so part boundaries count."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def _slug(text: str) -> str:
    # Dots are legal in subdomains but not in labels; one rule for every kind keeps it simple.
    return _DASHES.sub("-", _INVALID.sub("-", text.lower())).strip("-")


def hashed_name(*parts: str, max_length: int = DNS_SUBDOMAIN_MAX) -> str:
    """`kvtier-<part>-<part>…-<hash>`: a DNS label (and subdomain) of at most max_length."""
    digest = short_hash(*parts)
    readable = "-".join(s for s in (_slug(p) for p in (PREFIX, *parts)) if s)
    room = max_length - len(digest) - 1
    readable = readable[:room].rstrip("-")
    return f"{readable}-{digest}"


def nvme_storage_class_name(pool: str) -> str:
    """One no-provisioner class per NVMe pool; pool names are DNS labels and unique in the
    policy, and the fixed prefix leaves no ambiguity, so no digest is needed."""
    return f"{PREFIX}-nvme-{pool}"


def nvme_volume_name(namespace: str, tier: str, node: str) -> str:
    """The PersistentVolume of one tier on one node (cluster-scoped: the namespace counts)."""
    return hashed_name(namespace, tier, node, max_length=DNS_SUBDOMAIN_MAX)


def cephfs_claim_name(tier: str) -> str:
    """The shared CephFS claim in the tier's namespace; tier names are unique there, so the
    name is plain unless it would exceed the limit."""
    name = f"{PREFIX}-{tier}-cephfs"
    if len(name) <= DNS_SUBDOMAIN_MAX:
        return name
    return hashed_name(tier, "cephfs", max_length=DNS_SUBDOMAIN_MAX)


@lru_cache(maxsize=8192)  # asked for by every cache lookup of a tier's objects
def tier_id(namespace: str, tier: str) -> str:
    """Label value identifying a tier: tier names may exceed the 63 characters of a label
    value, and the uid is unknown in Plan mode before the object exists."""
    return short_hash(namespace, tier, length=16)


def python_hash_seed(namespace: str, tier: str) -> str:
    """PYTHONHASHSEED shared by every replica of a tier: the same for the tier's whole life
    (even when it is recreated over a retained volume), different between tiers."""
    return str(int(short_hash(namespace, tier), 16))
