"""The operator: kopf watches feed a cache and a work queue; reconcile is level-based."""
