"""The operator container's arguments, as deploy/manifests and the bundle ship them, are
accepted by `kvtier operator` and point at the certificate volume the pod mounts (kwok runs
no container, so the e2e installs never parse them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def pod_specs() -> dict[str, dict[str, Any]]:
    manifests = yaml.safe_load_all((REPO / "deploy" / "manifests" / "operator.yaml").read_text())
    (deployment,) = [d for d in manifests if d and d["kind"] == "Deployment"]
    csv = yaml.safe_load(
        (REPO / "bundle" / "manifests" / "kvtier-operator.clusterserviceversion.yaml").read_text()
    )
    (bundled,) = csv["spec"]["install"]["spec"]["deployments"]
    return {
        "deploy/manifests": deployment["spec"]["template"]["spec"],
        "bundle": bundled["spec"]["template"]["spec"],
    }


@pytest.mark.parametrize("source", ["deploy/manifests", "bundle"])
def test_shipped_arguments_parse_and_name_the_mounted_certificate(source: str) -> None:
    pod = pod_specs()[source]
    (container,) = pod["containers"]
    args = build_parser("operator").parse_args(["operator", *container["args"]])
    assert not args.metrics_insecure
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    (volume,) = secrets
    assert args.metrics_cert_file == f"{mounts[volume]}/tls.crt"
    assert args.metrics_key_file == f"{mounts[volume]}/tls.key"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.metrics_port == ports["metrics"]
