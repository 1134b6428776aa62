"""The operator: informers feed a cache and a work queue; reconcile is level-based."""
