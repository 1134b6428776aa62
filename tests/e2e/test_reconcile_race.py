"""A change that lands while a tier is reconciled is not lost.

The reconcile starts from a cached tier older than the API's (the user changed the spec in
between, and that event has not arrived); its own writes return the newer tier, so the change's
watch event is no longer news. The reconcile must then wake the tier again by itself.
Runs the controller in-process against the real API server, with its cache filled by hand to
hold exactly that stale view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kvtier.controller.controller import PENDING_RETRY_SECONDS, Controller
from kvtier.kube.rest import Kube
from kvtier.names import API_VERSION
from tests.conftest import api_client
from tests.e2e.conftest import create_target, inference_service, own_cluster
from tests.e2e.kube_helpers import create_tier, new_namespace


@pytest.fixture(scope="module")
def own_api() -> Iterator[client.ApiClient]:
    # Its own control plane: an operator another test started would reconcile the tier too.
    with own_cluster("race") as local:
        yield api_client(local.admin_kubeconfig)


def _spec(cpu: str) -> dict[str, Any]:
    return {
        "mode": "Apply",
        "targetRef": {"kind": "InferenceService", "name": "srv"},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "workload": {"averageContextTokens": 20000, "concurrentSessions": 8},
        "cpu": {"size": cpu},
    }


def test_a_spec_change_the_writes_reveal_is_reconciled_again(own_api: client.ApiClient) -> None:
    kube = Kube(own_api)
    ns = new_namespace(own_api, "race")
    create_target(
        own_api, ns, inference_service("srv", tp=1, model_uri="hf://meta-llama/Llama-3.1-8B")
    )
    create_tier(own_api, ns, "t", _spec("20Gi"))
    stale = kube.get(API_VERSION, "KVCacheTier", "t", ns)
    kube.merge_patch(API_VERSION, "KVCacheTier", "t", ns, {"spec": {"cpu": {"size": "30Gi"}}})

    controller = Controller(kube)
    cache = controller.cache
    cache.served = controller.served_versions()
    cache.set_tier((ns, "t"), stale)
    target = kube.get("serving.kserve.io/v1beta1", "InferenceService", "srv", ns)
    cache.set_target(("InferenceService", ns, "srv"), "serving.kserve.io/v1beta1", target)
    for node in kube.list("v1", "Node"):
        cache.set_node(node)

    def target_args() -> list[str]:
        got = kube.get("serving.kserve.io/v1beta1", "InferenceService", "srv", ns)
        return list(got["spec"]["predictor"]["model"]["args"])

    async def run() -> tuple[list[str], list[str]]:
        await controller.reconcile((ns, "t"))  # decides from 20Gi, learns of 30Gi writing
        first = target_args()
        await asyncio.sleep(PENDING_RETRY_SECONDS + 0.5)
        assert len(controller.queue) == 1, "the round woke the tier again for what it saw"
        key = await controller.queue.get()
        await controller.reconcile(key)
        controller.queue.done(key)
        await asyncio.sleep(PENDING_RETRY_SECONDS + 0.5)
        assert len(controller.queue) == 0, "nothing is left pending: no further rounds"
        return first, target_args()

    first, second = asyncio.run(run())
    assert first != second, "the second round writes what the 30Gi spec needs"
    tier = kube.get(API_VERSION, "KVCacheTier", "t", ns)
    assert tier["status"]["observedGeneration"] == tier["metadata"]["generation"] == 2
    assert tier["status"]["cpuTier"] == "30Gi"
