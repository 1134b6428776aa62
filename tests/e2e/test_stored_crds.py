"""The upstream CRDs a cluster got from their captured stored form (stored_crds.py, as every
test cluster gets them): the API server serves them as it serves what kubectl applies."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import stored_crds
from localcluster import LocalCluster, apiserver_version, upstream_crds

pytestmark = pytest.mark.usefixtures("crds")
LWS_FILE = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"


def _crd(cluster: LocalCluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(cluster.kubectl("get", "crd", name, "-o", "json"))
    return found


def test_a_stored_crd_is_what_the_api_server_makes_of_its_file(cluster: LocalCluster) -> None:
    """A server-side dry run of the file over the served CRD changes nothing: the capture
    is the object the API server makes of the file, not an edited copy."""
    served = _crd(cluster, LWS_CRD)
    dry = json.loads(
        cluster.kubectl(
            "apply",
            "--server-side",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            str(upstream_crds("full") / LWS_FILE),
        )
    )
    assert dry["spec"] == served["spec"]
    assert dry["metadata"]["generation"] == served["metadata"]["generation"] == 1
    assert any(
        c["type"] == "Established" and c["status"] == "True" for c in served["status"]["conditions"]
    )


def test_the_session_cluster_got_its_crds_from_the_capture(cluster: LocalCluster) -> None:
    """`make test` captures before the tests start (`localcluster stored-crds`), so the
    suite's clusters take the quick path: each served upstream CRD is the captured object
    (its uid is the capture's), not one applied anew."""
    directory = upstream_crds("full")
    stored = stored_crds.load(directory, apiserver_version(cluster.binary("kube-apiserver")))
    assert stored is not None, "no capture cached: run `make test` (its stored-crds step)"
    captured = {
        crd["metadata"]["name"]: crd["metadata"]["uid"]
        for crd in (json.loads(base64.b64decode(value)) for _, value in stored.objects)
    }
    assert LWS_CRD in captured and len(captured) == len(stored.objects)
    for name, uid in captured.items():
        assert _crd(cluster, name)["metadata"]["uid"] == uid, name
    # Writing them again where they exist is refused, leaving the served objects alone.
    before = _crd(cluster, LWS_CRD)["metadata"]["resourceVersion"]
    assert not stored_crds.write_if_absent(cluster.etcd_url, stored.objects)
    assert _crd(cluster, LWS_CRD)["metadata"]["resourceVersion"] == before
