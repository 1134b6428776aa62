"""Small helpers the operator e2e tests share."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.pod_security import USER_CONTAINER_SECURITY, USER_POD_SECURITY

GROUP, VERSION = "kvcache.io", "v1alpha1"
# Every namespace the e2e tests create enforces the restricted Pod Security Standard, so a
# pod kvtier creates (the probe Job's) or shapes (the model server's) that breaks it is
# refused by kube-apiserver's PodSecurity admission, as on a hardened cluster.
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def eventually(check: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiException as exc:
            if exc.status != 404:
                raise
            last = None
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last value {last!r}")


def exists(read: Callable[[], Any]) -> bool:
    """Whether a read succeeds; False on 404."""
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def as_restricted_user(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod (a dict) with the securityContext a restricted namespace's user writes, added
    only where nothing is set: a field already there (kvtier's, say) is kept as it is, so a
    pod something made privileged stays refused."""
    spec = pod["spec"]
    pod_sc = spec.setdefault("securityContext", {})
    for key, value in USER_POD_SECURITY.items():
        pod_sc.setdefault(key, copy.deepcopy(value))
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        sc = container.setdefault("securityContext", {})
        for key, value in USER_CONTAINER_SECURITY.items():
            sc.setdefault(key, copy.deepcopy(value))
    return pod


def create_restricted_namespace(api: client.ApiClient, name: str) -> str:
    """A namespace that enforces Pod Security `restricted` (POD_SECURITY_LABELS)."""
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels=dict(POD_SECURITY_LABELS))
        )
    )
    return name


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    return create_restricted_namespace(api, f"{prefix}-{uuid.uuid4().hex[:6]}")


def tier_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KVCacheTier",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_tier(api: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, "kvcachetiers", tier_body(name, spec)
    )


def get_tier(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "kvcachetiers", name
    )
    return cast(dict[str, Any], obj)


def condition(tier: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (tier.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return None


def wait_condition(
    api: client.ApiClient,
    ns: str,
    name: str,
    ctype: str,
    status: str,
    reason: str | None = None,
    timeout: float = 60,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        tier = get_tier(api, ns, name)
        c = condition(tier, ctype)
        if c and c["status"] == status and (reason is None or c["reason"] == reason):
            return tier
        return None

    result: dict[str, Any] = eventually(
        check, timeout, f"{ns}/{name} {ctype}={status} {reason or ''}"
    )
    return result


def apply_policy(api: client.ApiClient, spec: dict[str, Any]) -> None:
    custom = client.CustomObjectsApi(api)
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KVCachePolicy",
        "metadata": {"name": "cluster"},
        "spec": spec,
    }
    # The operator writes the policy's status between the read and the replace: read again
    # and retry on a conflict, as client-go's RetryOnConflict does.
    for attempt in range(5):
        try:
            current = custom.get_cluster_custom_object(GROUP, VERSION, "kvcachepolicies", "cluster")
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            custom.replace_cluster_custom_object(GROUP, VERSION, "kvcachepolicies", "cluster", body)
            return
        except ApiException as exc:
            if exc.status == 409 and attempt < 4:
                continue
            if exc.status != 404:
                raise
            body["metadata"].pop("resourceVersion", None)
            custom.create_cluster_custom_object(GROUP, VERSION, "kvcachepolicies", body)
            return


def delete_policy(api: client.ApiClient) -> None:
    try:
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            GROUP, VERSION, "kvcachepolicies", "cluster"
        )
    except ApiException as exc:
        if exc.status != 404:
            raise


def events_for(api: client.ApiClient, ns: str, name: str) -> list[client.CoreV1Event]:
    items = (
        client.CoreV1Api(api)
        .list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name},involvedObject.kind=KVCacheTier"
        )
        .items
    )
    return list(items)
