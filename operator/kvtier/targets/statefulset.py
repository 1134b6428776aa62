"""A plain apps/v1 StatefulSet running vLLM: its pod template is spec.template, written as
workload.py says (a per-pod NVMe tier is an ephemeral claim in each pod, as for the others)."""

from kvtier.targets.workload import Workload


class StatefulSet(Workload):
    kind: str = "StatefulSet"
    plural: str = "statefulsets"


STATEFUL_SET = StatefulSet()
