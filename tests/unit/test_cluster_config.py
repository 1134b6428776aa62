"""The local control plane's configuration, as `LocalCluster` writes it before starting
anything: the fake nodes' leases last long (renewing them was a fifth of an idle control
plane's CPU), and the controller manager must still never call a node unhealthy meanwhile."""

from __future__ import annotations

from pathlib import Path

import yaml

from localcluster import LocalCluster


def _configured(tmp_path: Path) -> LocalCluster:
    local = LocalCluster(tmp_path)
    local.bin_dir = tmp_path / "bin"  # only named in the argv: nothing is started
    for sub in ("pki", "pids", "logs", "etcd"):
        (tmp_path / sub).mkdir()
    local._configure()
    return local


def _seconds(value: str) -> int:
    assert value.endswith("s"), value
    return int(value[:-1])


def test_a_node_is_never_unhealthy_between_two_lease_renewals(tmp_path: Path) -> None:
    local = _configured(tmp_path)
    kwok = next(yaml.safe_load_all((tmp_path / "kwok.yaml").read_text()))
    lease = int(kwok["options"]["nodeLeaseDurationSeconds"])
    flags = [
        a
        for a in local.components["kube-controller-manager"].argv
        if a.startswith("--node-monitor-grace-period=")
    ]
    assert len(flags) == 1, local.components["kube-controller-manager"].argv
    grace = _seconds(flags[0].split("=", 1)[1])
    # kwok renews a lease every quarter of its duration: the grace covers a whole lease.
    assert grace > lease, (grace, lease)
    # Long leases: the renewals are what an idle control plane spent its CPU on.
    assert lease >= 600, lease
