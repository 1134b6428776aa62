"""The evictor's sidecar and Deployment (render/evictor.py): restricted, sized, labelled,
and running a command `kvtier evict` itself accepts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kvtier.cli import build_parser
from kvtier.names.labels import TIER_ID, TierRef
from kvtier.names.objects import EVICTOR_CONTAINER as CONTAINER
from kvtier.names.objects import EVICTOR_METRICS_PORT as METRICS_PORT
from kvtier.names.objects import KV_CACHE_VOLUME
from kvtier.render.evictor import (
    EvictorSettings,
    cephfs_evictor_deployment,
    evictor_resources,
    nvme_evictor_sidecar,
)
from kvtier.render.quantities import quantity_to_bytes
from tests.pod_security import restricted_violations

TIER = TierRef("llm", "nemotron", uid="1b4e28ba-2fa1-11d2-883f-0016d3cca427")
TiB = 1 << 40
BLOCK = 5 << 20  # Llama 3.1 70B's 16-token block
SETTINGS = EvictorSettings(
    image="quay.io/kvtier/kvtier:0.1.0", capacity_bytes=3 * TiB, block_bytes=BLOCK
)


def parse(command: list[str]) -> Any:
    assert command[:2] == ["kvtier", "evict"]
    return build_parser("evict").parse_args(command[1:])


def test_the_command_is_one_kvtier_evict_accepts() -> None:
    settings = EvictorSettings(
        image="img", capacity_bytes=TiB, block_bytes=BLOCK, high=0.9, low=0.6, protect_seconds=120
    )
    args = parse(nvme_evictor_sidecar(settings)["command"])
    assert args.dir == "/mnt/kv-cache" and args.allowed_root == ["/mnt/kv-cache"]
    assert args.capacity == str(TiB)
    assert (args.high, args.low, args.protect_seconds) == (0.9, 0.6, 120)
    assert args.interval == 60 and not args.once
    assert args.metrics_port == METRICS_PORT
    assert args.output == "json"


def test_the_nvme_sidecar_is_a_native_sidecar_on_the_tier_volume() -> None:
    sidecar = nvme_evictor_sidecar(SETTINGS)
    assert sidecar["name"] == CONTAINER
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["volumeMounts"] == [{"name": KV_CACHE_VOLUME, "mountPath": "/mnt/kv-cache"}]
    assert sidecar["ports"][0]["containerPort"] == METRICS_PORT
    # In a model-server pod that passes restricted, the sidecar keeps it passing.
    pod = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [sidecar],
        "containers": [
            {
                "name": "main",
                "image": "vllm",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": [{"name": KV_CACHE_VOLUME, "ephemeral": {"volumeClaimTemplate": {}}}],
    }
    assert restricted_violations(pod) == []
    assert restricted_violations({"containers": [sidecar]}) == [], "restricted on its own"


def test_the_cephfs_deployment() -> None:
    deployment = cephfs_evictor_deployment(TIER, "kvtier-nemotron-cephfs", SETTINGS)
    meta, spec = deployment["metadata"], deployment["spec"]
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert meta["namespace"] == "llm"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta["name"]) and len(meta["name"]) <= 47
    assert meta["labels"][TIER_ID] == TIER.id
    assert meta["ownerReferences"][0]["uid"] == TIER.uid, "removed with its tier"
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    template = spec["template"]
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    pod = template["spec"]
    assert restricted_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False
    assert pod["volumes"] == [
        {"name": KV_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": "kvtier-nemotron-cephfs"}}
    ]
    (container,) = pod["containers"]
    assert "restartPolicy" not in container
    assert parse(container["command"]).capacity == str(3 * TiB)


def test_names_differ_per_tier_and_claim() -> None:
    names = {
        cephfs_evictor_deployment(TierRef("llm", tier, uid="u"), claim, SETTINGS)["metadata"][
            "name"
        ]
        for tier, claim in [("a", "c1"), ("a", "c2"), ("b", "c1"), ("a" * 250, "c1")]
    }
    assert len(names) == 4 and all(len(n) <= 47 for n in names)


def test_a_deployment_needs_the_tier_uid() -> None:
    with pytest.raises(ValueError, match="uid"):
        cephfs_evictor_deployment(TierRef("llm", "t"), "claim", SETTINGS)


def test_resources_grow_with_the_files_the_tier_holds() -> None:
    big = evictor_resources(SETTINGS)  # 3 TiB of 5 MiB blocks: ~630,000 files
    small = evictor_resources(
        EvictorSettings(image="i", capacity_bytes=100 << 30, block_bytes=BLOCK)
    )
    big_memory = quantity_to_bytes(big["limits"]["memory"])
    assert big["requests"]["memory"] == big["limits"]["memory"]
    assert 180 << 20 <= big_memory <= 256 << 20
    assert quantity_to_bytes(small["limits"]["memory"]) == 128 << 20  # the floor
    assert big["requests"]["cpu"] and "cpu" not in big["limits"]


def test_the_model_servers_user() -> None:
    settings = EvictorSettings(
        image="i", capacity_bytes=TiB, block_bytes=BLOCK, run_as_user=1000680000
    )
    assert nvme_evictor_sidecar(settings)["securityContext"]["runAsUser"] == 1000680000


@pytest.mark.parametrize(
    "bad",
    [
        {"capacity_bytes": 0},
        {"block_bytes": 0},
        {"high": 0.7, "low": 0.8},
        {"high": 1.2},
    ],
)
def test_bad_settings(bad: dict[str, Any]) -> None:
    values: dict[str, Any] = {"image": "i", "capacity_bytes": TiB, "block_bytes": BLOCK, **bad}
    with pytest.raises(ValueError):
        EvictorSettings(**values)
