"""The local control plane behaves like a real cluster: the parts kvtier relies on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import GPU_NODES, GPU_PRODUCT, LocalCluster, process_alive
from tests.e2e.kube_helpers import as_restricted_user, exists, new_namespace


def eventually(check: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last value {last!r}")


@pytest.fixture
def namespace(admin_api: client.ApiClient) -> str:
    return new_namespace(admin_api, "smoke")


def test_version_is_the_built_release(admin_api: client.ApiClient) -> None:
    info = client.VersionApi(admin_api).get_code()
    assert info.git_version == "v1.36.3"


def test_crd_round_trip_with_status_subresource(
    cluster: LocalCluster, admin_api: client.ApiClient, namespace: str
) -> None:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.smoke.kvtier.test"},
        "spec": {
            "group": "smoke.kvtier.test",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    ext = client.ApiextensionsV1Api(admin_api)
    try:
        ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]
    except ApiException as exc:
        assert exc.status == 409
    eventually(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in (
                ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []
            )
        ),
        what="CRD Established",
    )
    api = client.CustomObjectsApi(admin_api)
    args = ("smoke.kvtier.test", "v1", namespace, "widgets")
    body = {
        "apiVersion": "smoke.kvtier.test/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3},
        "status": {"phase": "ignored"},
    }
    created = eventually(
        lambda: _try(lambda: api.create_namespaced_custom_object(*args, body)), what="CR create"
    )
    # status is a subresource: the main endpoint drops it, the status endpoint sets it
    assert "status" not in created or created["status"] in ({}, None)
    api.patch_namespaced_custom_object_status(*args, "w", {"status": {"phase": "Ready"}})
    got = api.get_namespaced_custom_object(*args, "w")
    assert got["spec"] == {"size": 3}
    assert got["status"] == {"phase": "Ready"}
    with pytest.raises(ApiException) as bad:
        api.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 0}})
    assert bad.value.status == 422


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ApiException as exc:
        if exc.status == 404:  # discovery of a fresh CRD lags a moment
            return None
        raise


def _pv(name: str, storage_class: str) -> client.V1PersistentVolume:
    return client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": "1Gi"},
            access_modes=["ReadWriteOnce"],
            storage_class_name=storage_class,
            persistent_volume_reclaim_policy="Retain",
            host_path=client.V1HostPathVolumeSource(path=f"/srv/{name}"),
        ),
    )


def test_pv_and_pvc_bind_and_bound_pvc_deletes(admin_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(admin_api)
    sc = f"manual-{namespace}"
    pv_name = f"pv-{namespace}"
    core.create_persistent_volume(_pv(pv_name, sc))
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="claim"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name=sc,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    eventually(
        lambda: (
            core.read_namespaced_persistent_volume_claim("claim", namespace).status.phase == "Bound"
        ),
        what="PVC Bound",
    )
    pv = core.read_persistent_volume(pv_name)
    assert pv.status.phase == "Bound"
    assert pv.spec.claim_ref.name == "claim"
    # pvc-protection holds a finalizer; with no pod using the claim it is released.
    assert "kubernetes.io/pvc-protection" in (
        core.read_namespaced_persistent_volume_claim("claim", namespace).metadata.finalizers or []
    )
    core.delete_namespaced_persistent_volume_claim("claim", namespace)
    eventually(
        lambda: (
            not exists(lambda: core.read_namespaced_persistent_volume_claim("claim", namespace))
        ),
        what="PVC deletion to complete",
    )
    eventually(
        lambda: core.read_persistent_volume(pv_name).status.phase == "Released", what="PV Released"
    )
    core.delete_persistent_volume(pv_name)


def test_owned_object_is_garbage_collected(admin_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(admin_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[ref])),
    )
    core.delete_namespaced_config_map("owner", namespace)
    eventually(
        lambda: not exists(lambda: core.read_namespaced_config_map("dependent", namespace)),
        what="garbage collection of the dependent",
    )


def test_fake_gpu_nodes_are_ready(admin_api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(admin_api).list_node(label_selector="type=kwok").items
    names = sorted(n.metadata.name for n in nodes)
    assert names == sorted(f"gpu-node-{i}" for i in range(GPU_NODES))
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready["Ready"] == "True", node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.capacity["cpu"] == "224"
        assert node.metadata.labels["nvidia.com/gpu.product"] == GPU_PRODUCT


def test_pod_is_scheduled_to_a_gpu_node_and_runs(
    admin_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin_api)
    eventually(
        lambda: exists(lambda: core.read_namespaced_service_account("default", namespace)),
        what="default ServiceAccount",
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "vllm/vllm-openai:v0.24.0",
                    "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "256Gi"}},
                }
            ]
        },
    }
    # The namespace enforces Pod Security `restricted`.
    core.create_namespaced_pod(namespace, as_restricted_user(pod))  # type: ignore[arg-type]
    pod = eventually(
        lambda: (p := core.read_namespaced_pod("vllm", namespace)).status.phase == "Running" and p,
        what="pod Running",
    )
    assert pod.spec.node_name.startswith("gpu-node-")


def test_operator_identity_cannot_read_secrets(operator_api: client.ApiClient) -> None:
    core = client.CoreV1Api(operator_api)
    with pytest.raises(ApiException) as denied:
        core.list_secret_for_all_namespaces()
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied_ns:
        core.list_namespaced_secret("kvtier-system")
    assert denied_ns.value.status == 403
    # ...while what the repo's RBAC grants works under the same identity.
    assert core.list_node().items


def test_down_stops_exactly_what_up_started(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = LocalCluster(tmp_path_factory.mktemp("second-cluster"), nodes=1).up()
    pids = {p.stem: int(p.read_text()) for p in (other.workdir / "pids").glob("*.pid")}
    assert set(pids) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
    assert other.kubectl("get", "nodes", "-o", "name").split() == ["node/gpu-node-0"]
    other.down()
    assert not [name for name, pid in pids.items() if process_alive(pid)]
    assert not list((other.workdir / "pids").glob("*.pid"))
    # ...and the session's own control plane is untouched.
    session = int((cluster.workdir / "pids" / "kube-apiserver.pid").read_text())
    assert process_alive(session)
