"""What the sizing engine knows of each disk tier type: one line per type.

The tier types themselves (what kvtier provisions, mounts, probes and evicts for each) are
kvtier.tiers, one module each. Sizing sits below them and imports none: `kvtier plan` sizes
without the operator's code (bench/startup.py). tests/unit/test_tiers_registry.py keeps this
table and kvtier.tiers.registry in step: the same types in the same order, with the same vLLM
tier type and sharing.
"""

from __future__ import annotations

from kvtier.sizing.record import Record


class DiskFacts(Record):
    """One disk tier type as sizing sees it."""

    name: str  # spec.disk.type and SizingPlan.disk; the topology is CPUAnd<name>
    vllm_type: str  # the secondary tier vLLM builds: "fs" (a volume) or "obj" (a bucket)
    shared: bool  # one cache for all replicas (a claim they all mount, a bucket)
    aliases: tuple[str, ...]  # other spellings `kvtier plan` accepts (lower case, no dashes)
    capacity: str  # how its default capacity is figured (decisions["diskBytes"])


DISK_FACTS: tuple[DiskFacts, ...] = (
    DiskFacts(
        "NVMe",
        "fs",
        shared=False,
        aliases=("nvme",),
        capacity="per replica: the working set, in whole GiB (the operator claims the pool's "
        "capacityPerNode unless spec.disk.nvme.size is set)",
    ),
    DiskFacts(
        "CephFS",
        "fs",
        shared=True,
        aliases=("cephfs",),
        capacity="one shared volume: the working set of all replicas, in whole GiB",
    ),
    DiskFacts(
        "ObjectStore",
        "obj",
        shared=True,
        aliases=("objectstore", "s3", "rgw"),
        capacity="a bucket: no capacity to claim",
    ),
)
BY_NAME = {d.name: d for d in DISK_FACTS}
DISK_TYPES: tuple[str, ...] = tuple(d.name for d in DISK_FACTS)
SHARED_DISK_TYPES = frozenset(d.name for d in DISK_FACTS if d.shared)  # one cache for all
