"""A plain apps/v1 Deployment running vLLM (vLLM's production-stack chart, llm-d's
modelservice chart): its pod template is spec.template, written as workload.py says."""

from kvtier.targets.workload import Workload


class Deployment(Workload):
    kind: str = "Deployment"
    plural: str = "deployments"


DEPLOYMENT = Deployment()
