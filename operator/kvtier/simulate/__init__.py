"""`kvtier simulate`: a discrete-event what-if model of offload tiers under agentic load.

Pure and seeded: no Kubernetes, no I/O. Entry point `simulate(SimConfig(...))` →
`Simulation` with one `ScenarioResult` per scenario (tiers off, CPU, CPU + disk).
"""

from kvtier.simulate.config import (
    GPU,
    GPUS,
    H100,
    RESTORE_POLICIES,
    ROUTINGS,
    SCENARIOS,
    STUDY_CEPHFS,
    STUDY_NVME,
    DiskTier,
    SimConfig,
    Workload,
    llmd_gpt_oss_config,
    study_config,
)
from kvtier.simulate.results import ScenarioResult, Simulation, simulate
from kvtier.simulate.setup import Derived, derive

__all__ = [
    "GPU",
    "GPUS",
    "H100",
    "RESTORE_POLICIES",
    "ROUTINGS",
    "SCENARIOS",
    "STUDY_CEPHFS",
    "STUDY_NVME",
    "Derived",
    "DiskTier",
    "ScenarioResult",
    "SimConfig",
    "Simulation",
    "Workload",
    "derive",
    "llmd_gpt_oss_config",
    "simulate",
    "study_config",
]
