"""The model server kinds kvtier writes its tiers to: one module per kind behind one protocol
(base.py), listed once in registry.py, which policy/ and render/ ask for anything kind-specific.

pod.py is what every kind does to a pod template that runs vLLM, patch.py the writes it sends,
facts.py what sizing reads, offload.py what a plan gives a model server.

Nothing is imported here: render.scheduler imports targets.offload, and the kind modules
import render.scheduler, so an import of the registry from this module would cycle.
"""
