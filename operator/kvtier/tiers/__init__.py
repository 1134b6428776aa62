"""The tier types kvtier offers: the CPU tier and the disk tiers behind it (NVMe, CephFS,
ObjectStore), one module per type behind one protocol (base.py), listed once in registry.py,
which policy/, render/ and observe/ ask for anything tier-specific.

base.py also holds what a tier type gives the model server's pods (its claim, the evictor
sidecar, the credentials Secret) and the probe's volume; common.py what the types share.

Nothing is imported here: the target kinds import tiers.base, and an import of the registry
from this module would load every tier module with it.
"""
