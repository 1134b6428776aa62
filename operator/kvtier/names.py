"""Names other parts (and other tools, such as Argo CD settings) depend on."""

FIELD_MANAGER = "kvtier-operator"  # server-side apply manager of every kvtier write
FINALIZER = "kvcache.io/cleanup"  # held while kvtier has applied anything for a tier
# kvtier's record on a target: what it applied and the user's values it overwrote (JSON).
APPLIED_ANNOTATION = "kvcache.io/applied"
