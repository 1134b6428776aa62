"""The names, labels and records every layer reads (the bottom of the package: imports
nothing of kvtier's but itself). Other tools depend on them too: Argo CD settings, dashboards,
and the users who select kvtier's objects by label.

- names/labels.py: the labels and owner references on everything kvtier writes;
- names/objects.py: the names of the objects and volumes kvtier writes;
- names/records.py: the annotations in which kvtier records what it changed, and their reading.
"""

GROUP = "kvcache.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"  # of KVCacheTier and KVCachePolicy

FIELD_MANAGER = "kvtier-operator"  # server-side apply manager of every kvtier write
FINALIZER = "kvcache.io/cleanup"  # held while kvtier has applied anything for a tier
