"""KServe v0.20.0's own LLMInferenceService manager (hack/localcluster/kserve_controller.py)
takes kvtier's write to a scheduler ConfigMap to the endpoint picker: it passes the key's text
as the picker Deployment's `--config-text`, and when kvtier changes the text (and gives it back
with the tier), it rewrites that argument, so the Deployment rolls its pods. kvtier restarts
nothing itself: the picker reads its config only at start-up (docs/llm-d.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from kserve_controller import KServeController
from kvtier.kube.rest import Kube
from localcluster import LocalCluster
from tests.conftest import api_client
from tests.e2e.conftest import own_cluster
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    get_tier,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY
from tests.e2e.test_scheduler_configmap import CONFIGMAP, EPP, TIER, _configmap, _opt_in, _server

# A cold build of the manager downloads KServe's module graph (minutes on a fresh cache).
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Any]]:
    """A control plane of its own (KServe's webhooks and conversion would reach every other
    test's LLMInferenceService), KServe's manager and kvtier's operator on it."""
    logs = tmp_path_factory.mktemp("kserve-epp")
    with own_cluster("kserve-epp") as cluster:
        kserve = KServeController(cluster, logs)
        operator = OperatorProcess(cluster, logs / "operator.log")
        try:
            kserve.start()
            api = api_client(cluster.admin_kubeconfig)
            apply_policy(api, POLICY)
            operator.start()
            yield cluster, api
        finally:
            operator.stop()
            kserve.stop()
            print(f"logs: {logs}")


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


def _cpu_parameters(text: str | None) -> Any:
    """The CPU scorer's parameters in the text the picker gets (KServe re-serialises it)."""
    if text is None:
        return None
    plugins = yaml.safe_load(text)["plugins"]
    return next(p for p in plugins if p.get("name") == "cpu-prefix-cache-scorer").get("parameters")


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
def ns(stack: tuple[LocalCluster, Any]) -> str:
    _, api = stack
    ns = new_namespace(api, "epp-kserve")
    _opt_in(api, ns)
    Kube(api).create({**_configmap(), "metadata": {"name": CONFIGMAP, "namespace": ns}})
    return ns


def test_kserve_passes_kvtiers_values_to_a_08_picker_and_the_users_back(
    stack: tuple[LocalCluster, Any], ns: str
) -> None:
    _, api = stack
    Kube(api).create(_server_at(ns, "qwen", "0.8.0"))
    user = {"autoTune": False, "lruCapacityPerServer": 41000}
    first = eventually(
        lambda: _cpu_parameters(_config_text(p := _picker(api, ns, "qwen"))) == user and p,
        timeout=120,
        what="KServe's picker on the user's values",
    )
    create_tier(api, ns, "qwen", TIER)
    wait_condition(api, ns, "qwen", "SchedulerSynced", "True", timeout=120)
    (decode,) = get_tier(api, ns, "qwen")["status"]["plan"]["roles"]
    want = {"autoTune": False, "lruCapacityPerServer": decode["cpuTierBlocks"]}
    rolled = eventually(
        lambda: _cpu_parameters(_config_text(p := _picker(api, ns, "qwen"))) == want and p,
        timeout=120,
        what="KServe's picker on kvtier's values",
    )
    # A new pod template: the Deployment rolls the picker, which reads the text at start-up.
    assert rolled["metadata"]["generation"] > first["metadata"]["generation"]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "kvcache.io", "v1alpha1", ns, "kvcachetiers", "qwen"
    )
    eventually(
        lambda: _cpu_parameters(_config_text(_picker(api, ns, "qwen"))) == user,
        timeout=120,
        what="the user's values back",
    )


def test_a_09_picker_gets_no_scorer_parameters_so_kvtier_writes_none_there(
    stack: tuple[LocalCluster, Any], ns: str
) -> None:
    """KServe's own preset (picker 0.9.0) strips the scorer's parameters from the text: for a
    scorer that names no producer kvtier says where the capacity goes instead, and leaves the
    ConfigMap alone."""
    _, api = stack
    Kube(api).create(_server_at(ns, "qwen-09", None))
    eventually(
        lambda: (p := _picker(api, ns, "qwen-09")) and _config_text(p) is not None,
        timeout=120,
        what="KServe's picker",
    )
    assert _cpu_parameters(_config_text(_picker(api, ns, "qwen-09"))) is None
    create_tier(api, ns, "qwen-09", {**TIER, "targetRef": {**TIER["targetRef"], "name": "qwen-09"}})
    tier = wait_condition(
        api, ns, "qwen-09", "SchedulerSynced", "False", "SchedulerParametersDropped", timeout=120
    )
    message = next(c for c in tier["status"]["conditions"] if c["type"] == "SchedulerSynced")
    assert "approx-prefix-cache-producer" in message["message"]
    stored = Kube(api).request("GET", f"/api/v1/namespaces/{ns}/configmaps/{CONFIGMAP}")
    assert stored["data"]["epp"] == EPP


# llm-d router v0.9.0's tiered layout: the CPU scorer reads the producer it names.
EPP_09 = EPP.replace(
    "  name: cpu-prefix-cache-scorer\n  parameters:\n"
    "    autoTune: false   # vLLM reports no CPU-tier capacity\n"
    "    lruCapacityPerServer: 41000\n",
    "  name: cpu-prefix-cache-scorer\n  parameters:\n"
    "    prefixMatchInfoProducerName: cpuPrefixProducer\n",
).replace(
    "- type: queue-scorer\n",
    "- type: queue-scorer\n- type: approx-prefix-cache-producer\n  name: cpuPrefixProducer\n"
    "  parameters:\n    blockSizeTokens: 64   # the producer's floor\n",
)


def _producer(text: str | None) -> Any:
    if text is None:
        return None
    plugins = yaml.safe_load(text)["plugins"]
    return next(p for p in plugins if p.get("name") == "cpuPrefixProducer").get("parameters")


def test_a_09_pickers_producer_gets_kvtiers_capacity_through_kserve(
    stack: tuple[LocalCluster, Any], ns: str
) -> None:
    _, api = stack
    assert EPP_09 != EPP and "cpuPrefixProducer" in EPP_09
    name = "qwen-producer"
    configmap = {"name": f"{name}-epp", "namespace": ns}
    Kube(api).create({**_configmap(EPP_09), "metadata": configmap})
    server = _server_at(ns, name, None)  # KServe's preset: picker 0.9.0
    server["spec"]["router"]["scheduler"]["config"]["ref"]["name"] = configmap["name"]
    Kube(api).create(server)
    user = {"blockSizeTokens": 64}
    eventually(
        lambda: _producer(_config_text(_picker(api, ns, name))) == user,
        timeout=120,
        what="KServe's picker on the user's producer",
    )
    create_tier(api, ns, name, {**TIER, "targetRef": {**TIER["targetRef"], "name": name}})
    tier = wait_condition(api, ns, name, "SchedulerSynced", "True", timeout=120)
    (decode,) = tier["status"]["plan"]["roles"]
    blocks = decode["cpuBytesToUse"] // (64 * tier["status"]["sizing"]["bytesPerToken"])
    assert tier["status"]["plan"]["scheduler"]["plugin"] == "cpuPrefixProducer"
    assert tier["status"]["plan"]["scheduler"]["lruCapacityPerServer"] == blocks
    want = {**user, "autoTune": False, "lruCapacityPerServer": blocks}
    eventually(
        lambda: _producer(_config_text(_picker(api, ns, name))) == want,
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
        lambda: _producer(_config_text(_picker(api, ns, name))) == user,
        timeout=120,
        what="KServe's picker on the user's producer again",
    )
