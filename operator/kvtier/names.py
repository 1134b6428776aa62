"""Names other parts (and other tools, such as Argo CD settings) depend on."""

FIELD_MANAGER = "kvtier-operator"  # server-side apply manager of every kvtier write
FINALIZER = "kvcache.io/cleanup"  # held while kvtier has applied anything for a tier
