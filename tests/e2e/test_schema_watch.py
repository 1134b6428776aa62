"""A CRD replaced on the API server shows in its own discovery as a new schema hash of the
CRD's group, which is what the operator's schema watch (SchemaWatch, run here on its own, not
inside an operator process) compares on each pass.

The operator's restricted identity reads /openapi/v3 (system:discovery, nothing of kvtier's
RBAC); installing KServe v0.20.0's minimal CRDs over its full ones changes the schema hash of
serving.kserve.io, and nothing else the watch follows.
"""

from __future__ import annotations

import time

from kvtier.controller.schemas import SchemaWatch
from kvtier.kube.rest import Kube
from localcluster import upstream_crds
from tests.conftest import api_client
from tests.e2e.conftest import own_cluster


def test_a_replaced_crd_changes_its_groups_schema_hash() -> None:
    with own_cluster("schemas") as cluster:
        kube = Kube(api_client(cluster.operator_kubeconfig))
        seen: list[set[str]] = []
        watch = SchemaWatch(lambda: kube.request("GET", "/openapi/v3"), seen.append)
        assert watch.check() == set()  # the first read records the hashes only
        assert watch.hashes is not None
        assert {"serving.kserve.io/v1beta1", "serving.kserve.io/v1alpha2"} <= set(watch.hashes)
        assert {"ceph.rook.io/v1"} <= set(watch.hashes)
        assert all(watch.hashes.values()), watch.hashes
        assert watch.check() == set()  # nothing changed, nothing reported

        minimal = upstream_crds("minimal") / "serving.kserve.io_inferenceservices.yaml"
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(minimal))
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/inferenceservices.serving.kserve.io",
        )
        changed: set[str] = set()
        for _ in range(50):  # the aggregated OpenAPI is rebuilt shortly after the update
            changed = watch.check()
            if changed:
                break
            time.sleep(0.2)
        assert changed == {"serving.kserve.io"}
        assert seen == [{"serving.kserve.io"}]
