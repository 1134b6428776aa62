"""The demo: bring up the local control plane and show the fake GPU fleet."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "localcluster"))

from localcluster import LocalCluster, default_workdir  # noqa: E402


def main() -> int:
    keep = os.environ.get("KVTIER_DEMO_KEEP") == "1"
    cluster = LocalCluster(default_workdir())
    cluster.up()
    try:
        print("\n== Fake GPU fleet (kwok nodes on a real kube-apiserver) ==")
        print(
            cluster.kubectl(
                "get",
                "nodes",
                "-L",
                "nvidia.com/gpu.product",
                "-o",
                "custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,"
                "GPUS:.status.allocatable.nvidia\\.com/gpu,MEMORY:.status.allocatable.memory,"
                "CPUS:.status.allocatable.cpu,PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product",
            )
        )
        print(cluster.kubectl("version"))
    finally:
        if keep:
            print(f"cluster kept running; KUBECONFIG={cluster.admin_kubeconfig}")
        else:
            cluster.down()
            shutil.rmtree(cluster.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
