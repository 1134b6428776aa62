"""KServe v0.20.0's own LLMInferenceService manager (hack/localcluster/kserve_controller.py)
takes kvtier's write to a scheduler ConfigMap to the endpoint picker: it passes the key's text
as the picker Deployment's `--config-text`, and when kvtier changes the text (and gives it back
with the tier), it rewrites that argument, so the Deployment rolls its pods. kvtier restarts
nothing itself: the picker reads its config only at start-up (docs/llm-d.md). What the picker
makes of that argument is read by the picker's own config loader (tests/epp_oracle.py,
gateway-api-inference-extension v1.5.0): the capacity of the prefix index it builds.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client

from kvtier.kube.rest import Kube
from tests.e2e.conftest import KServeStack
from tests.e2e.kube_helpers import (
    create_tier,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.test_llmd_roles import _tier
from tests.e2e.test_scheduler_configmap import CONFIGMAP, TIER, _configmap, _opt_in, _server
from tests.epp_oracle import LOADER_PRODUCER, index
from tests.scheduler_fixtures import EPP, EPP_09, plugin_parameters

# A cold build of the manager downloads KServe's module graph (minutes on a fresh cache).
pytestmark = pytest.mark.timeout(1800)


def _picker(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    """KServe's endpoint-picker Deployment for the server, if written yet."""
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}-kserve-router-scheduler"
    try:
        return cast(dict[str, Any], Kube(api).request("GET", path))
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _config_text(deployment: dict[str, Any] | None) -> str | None:
    if deployment is None:
        return None
    spec = deployment["spec"]["template"]["spec"]
    (main,) = [c for c in spec["containers"] if c["name"] == "main"]
    args: list[str] = main.get("args") or []
    return args[args.index("--config-text") + 1] if "--config-text" in args else None


def _index(deployment: dict[str, Any] | None, plugin: str = LOADER_PRODUCER) -> Any:
    """(capacity, autoTune) of the prefix index the picker's loader builds from the picker
    Deployment's `--config-text` (before 0.9.0: the producer it adds from the CPU scorer's
    parameters, the last scorer's); None before KServe wrote the Deployment."""
    text = _config_text(deployment)
    if text is None:
        return None
    found = index(text, plugin)
    return found["indexCapacity"], found["parameters"]["autoTune"]


def _server_at(ns: str, name: str, version: str | None) -> dict[str, Any]:
    server = _server()
    scheduler = server["spec"]["router"]["scheduler"]
    if version is None:
        del scheduler["annotations"]  # KServe's preset: picker 0.9.0
    else:
        scheduler["annotations"] = {"app.kubernetes.io/version": version}
    # No managed route: KServe would first want its ingress Gateway, which nothing here runs.
    server["spec"]["router"] = {"scheduler": scheduler}
    return {**server, "metadata": {"name": name, "namespace": ns}}


@pytest.fixture(scope="module")
def ns(kserve_stack: KServeStack) -> str:
    api = kserve_stack.api
    ns = new_namespace(api, "epp-kserve")
    _opt_in(api, ns)
    Kube(api).create({**_configmap(), "metadata": {"name": CONFIGMAP, "namespace": ns}})
    return ns


def test_kserve_passes_kvtiers_values_to_a_08_picker_and_the_users_back(
    kserve_stack: KServeStack, ns: str
) -> None:
    api = kserve_stack.api
    Kube(api).create(_server_at(ns, "qwen", "0.8.0"))
    user = (41000, False)
    first = eventually(
        lambda: _index(p := _picker(api, ns, "qwen")) == user and p,
        timeout=120,
        what="KServe's picker on the user's values",
    )
    create_tier(api, ns, "qwen", TIER)
    wait_condition(api, ns, "qwen", "SchedulerSynced", "True", timeout=120)
    (decode,) = get_tier(api, ns, "qwen")["status"]["plan"]["roles"]
    want = (decode["cpuTierBlocks"], False)
    rolled = eventually(
        lambda: _index(p := _picker(api, ns, "qwen")) == want and p,
        timeout=120,
        what="KServe's picker on kvtier's values",
    )
    # A new pod template: the Deployment rolls the picker, which reads the text at start-up.
    assert rolled["metadata"]["generation"] > first["metadata"]["generation"]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "qwen"
    )
    eventually(
        lambda: _index(_picker(api, ns, "qwen")) == user,
        timeout=120,
        what="the user's values back",
    )


def test_a_09_picker_gets_no_scorer_parameters_so_kvtier_writes_none_there(
    kserve_stack: KServeStack, ns: str
) -> None:
    """KServe's own preset (picker 0.9.0) strips the scorer's parameters from the text: for a
    scorer that names no producer kvtier says where the capacity goes instead, and leaves the
    ConfigMap alone."""
    api = kserve_stack.api
    Kube(api).create(_server_at(ns, "qwen-09", None))
    eventually(
        lambda: (p := _picker(api, ns, "qwen-09")) and _config_text(p) is not None,
        timeout=120,
        what="KServe's picker",
    )
    assert plugin_parameters(_config_text(_picker(api, ns, "qwen-09"))) is None
    # So the loader's index is its default, autoTune on: the user's 41000 reaches no picker.
    assert _index(_picker(api, ns, "qwen-09")) == (31250, True)
    create_tier(api, ns, "qwen-09", _tier("qwen-09"))
    tier = wait_condition(
        api, ns, "qwen-09", "SchedulerSynced", "False", "SchedulerParametersDropped", timeout=120
    )
    message = next(c for c in tier["status"]["conditions"] if c["type"] == "SchedulerSynced")
    assert "approx-prefix-cache-producer" in message["message"]
    stored = Kube(api).request("GET", f"/api/v1/namespaces/{ns}/configmaps/{CONFIGMAP}")
    assert stored["data"]["epp"] == EPP


def _producer(api: client.ApiClient, ns: str, name: str) -> Any:
    """(capacity, autoTune) of the producer's index, as the picker's loader builds it from the
    text KServe gives the picker (it re-serialises it)."""
    return _index(_picker(api, ns, name), "cpuPrefixProducer")


def test_a_09_pickers_producer_gets_kvtiers_capacity_through_kserve(
    kserve_stack: KServeStack, ns: str
) -> None:
    api = kserve_stack.api
    assert EPP_09 != EPP and "cpuPrefixProducer" in EPP_09
    name = "qwen-producer"
    configmap = {"name": f"{name}-epp", "namespace": ns}
    Kube(api).create({**_configmap(EPP_09), "metadata": configmap})
    server = _server_at(ns, name, None)  # KServe's preset: picker 0.9.0
    server["spec"]["router"]["scheduler"]["config"]["ref"]["name"] = configmap["name"]
    Kube(api).create(server)
    user = (31250, True)  # the producer's defaults: the user set only blockSizeTokens
    eventually(
        lambda: _producer(api, ns, name) == user,
        timeout=120,
        what="KServe's picker on the user's producer",
    )
    create_tier(api, ns, name, _tier(name))
    tier = wait_condition(api, ns, name, "SchedulerSynced", "True", timeout=120)
    (decode,) = tier["status"]["plan"]["roles"]
    blocks = decode["cpuBytesToUse"] // (64 * tier["status"]["sizing"]["bytesPerToken"])
    assert tier["status"]["plan"]["scheduler"]["plugin"] == "cpuPrefixProducer"
    assert tier["status"]["plan"]["scheduler"]["lruCapacityPerServer"] == blocks
    want = (blocks, False)
    eventually(
        lambda: _producer(api, ns, name) == want,
        timeout=120,
        what="KServe's picker on kvtier's producer values",
    )
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", name
    )
    eventually(
        lambda: (
            Kube(api).request("GET", f"/api/v1/namespaces/{ns}/configmaps/{configmap['name']}")[
                "data"
            ]["epp"]
            == EPP_09
        ),
        timeout=120,
        what="the user's text back",
    )
    eventually(
        lambda: _producer(api, ns, name) == user,
        timeout=120,
        what="KServe's picker on the user's producer again",
    )
