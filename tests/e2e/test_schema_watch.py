"""A CRD replaced on the API server is noticed by the schema watch, and under the running
operator (`kvtier operator`, OperatorProcess) a write the old schema did not keep is released
and the tier reconciled again once the CRD is updated.

The held write: KServe v0.20.0's own InferenceService CRD with the properties of a volume's
`ephemeral` taken out, as an older or trimmed CRD may have it, prunes the claim template of
the NVMe tier's volume kvtier writes. kvtier sees that in the API server's answer,
reports Applied=False SchemaMismatch and holds that write back (no write loop, through two
periodic resyncs); the full CRD installed again changes the schema hash of serving.kserve.io,
the watch releases the write, and the tier is Applied with the volume's claim as kvtier
sized it.

The operator's restricted identity reads /openapi/v3 (system:discovery, nothing of kvtier's
RBAC); installing KServe's minimal CRDs over its full ones changes the schema hash of
serving.kserve.io, and nothing else the watch follows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crd_documents import documents
from kvtier.controller.schemas import INTERVAL_SECONDS, SchemaWatch
from kvtier.kube.rest import Kube
from localcluster import LocalCluster, upstream_crds
from tests.conftest import api_client
from tests.e2e import audit
from tests.e2e.conftest import create_target, inference_service, own_cluster
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY, POOL

ISVC_CRD = "serving.kserve.io_inferenceservices.yaml"
VOLUME = "kvtier-kv-cache"  # the NVMe tier's volume kvtier adds to the predictor


@pytest.fixture(scope="module")
def cluster_() -> Iterator[LocalCluster]:
    with own_cluster("schemas") as cluster:
        yield cluster


def _established(cluster: LocalCluster, crd: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    cluster.wait_established("inferenceservices.serving.kserve.io")


def _without_ephemeral_fields(full: Path, out: Path) -> Path:
    """KServe's full InferenceService CRD, its predictor volumes' `ephemeral` an object with
    no properties: the API server prunes what kvtier writes there."""
    [trimmed] = documents(full)  # a fresh copy: the cache is JSON
    for version in trimmed["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        volume = spec["properties"]["predictor"]["properties"]["volumes"]["items"]
        volume["properties"]["ephemeral"] = {"type": "object"}
    out.write_text(json.dumps(trimmed))  # JSON is YAML to kubectl, and quick to write
    return out


def _volume(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    isvc = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", ns, "inferenceservices", name
    )
    volumes = isvc["spec"]["predictor"].get("volumes") or []
    found: dict[str, Any] = next((v for v in volumes if v["name"] == VOLUME), {})
    return found


def _held(operator: OperatorProcess) -> float:
    """kvtier_writes_suppressed_total{kind="InferenceService"}."""
    for line in operator.metrics().splitlines():
        if line.startswith('kvtier_writes_suppressed_total{kind="InferenceService"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_held_write_is_released_and_the_tier_reconciled_when_the_crd_is_updated(
    cluster_: LocalCluster, tmp_path: Path
) -> None:
    full = upstream_crds("full") / ISVC_CRD
    _established(cluster_, _without_ephemeral_fields(full, tmp_path / ISVC_CRD))
    api = api_client(cluster_.admin_kubeconfig)
    apply_policy(api, POLICY)  # its NVMe pool
    operator = OperatorProcess(cluster_, tmp_path / "operator.log").start()
    try:
        ns = new_namespace(api, "held")
        create_target(
            api,
            ns,
            inference_service("llama", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct"),
        )
        create_tier(
            api,
            ns,
            "llama",
            {
                "mode": "Apply",
                "targetRef": {"kind": "InferenceService", "name": "llama"},
                "workload": {"averageContextTokens": 50000, "concurrentSessions": 8},
                "disk": {"type": "NVMe", "nvme": {"pool": POOL, "size": "1Ti"}},
                "probe": {"enabled": False},
            },
        )
        try:
            tier = wait_condition(api, ns, "llama", "Applied", "False", "SchemaMismatch", 90)
        except AssertionError as exc:
            got = get_tier(api, ns, "llama").get("status", {}).get("conditions")
            raise AssertionError(f"{exc}; conditions {got}") from None
        applied = next(c for c in tier["status"]["conditions"] if c["type"] == "Applied")
        assert f"volumes[{VOLUME}].ephemeral" in applied["message"], applied["message"]
        assert _volume(api, ns, "llama").get("ephemeral") == {}  # pruned, as it says

        # Held, not looped: through two periodic passes, no write to the target, and the
        # held write is counted as suppressed.
        names: list[str] = []
        writes = audit.idle_writes(cluster_.audit_log, operator, names=names, namespace=ns)
        assert writes[("patch", "inferenceservices")] == 0, names
        assert _held(operator) > 0

        # The CRD is updated: the schema watch (every INTERVAL_SECONDS) sees the new hash,
        # releases the write, and the tier is reconciled again with the write sent.
        updated = time.time()
        _established(cluster_, full)
        wait_condition(api, ns, "llama", "Applied", "True", timeout=INTERVAL_SECONDS + 60)
        claim = _volume(api, ns, "llama")["ephemeral"]["volumeClaimTemplate"]["spec"]
        assert claim["resources"]["requests"]["storage"] == "1Ti", claim
        after = audit.writes(cluster_.audit_log, since=updated, namespace=ns)
        assert after[("patch", "inferenceservices")] >= 1, after
    finally:
        operator.stop()


def test_a_replaced_crd_changes_its_groups_schema_hash(cluster_: LocalCluster) -> None:
    """SchemaWatch on its own (no operator process), as the operator's identity reads it:
    the first read records the hashes; installing the minimal CRD over the full one reports
    serving.kserve.io changed, once, and nothing else."""
    kube = Kube(api_client(cluster_.operator_kubeconfig))
    seen: list[set[str]] = []
    watch = SchemaWatch(lambda: kube.request("GET", "/openapi/v3"), seen.append)
    assert watch.check() == set()  # the first read records the hashes only
    assert watch.hashes is not None
    assert {"serving.kserve.io/v1beta1", "serving.kserve.io/v1alpha2"} <= set(watch.hashes)
    assert {"ceph.rook.io/v1"} <= set(watch.hashes)
    assert all(watch.hashes.values()), watch.hashes
    assert watch.check() == set()  # nothing changed, nothing reported

    _established(cluster_, upstream_crds("minimal") / ISVC_CRD)
    changed: set[str] = set()
    for _ in range(50):  # the aggregated OpenAPI is rebuilt shortly after the update
        changed = watch.check()
        if changed:
            break
        time.sleep(0.2)
    assert changed == {"serving.kserve.io"}
    assert seen == [{"serving.kserve.io"}]
