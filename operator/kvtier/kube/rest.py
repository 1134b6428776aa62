"""A small JSON client over the official ApiClient: paths, verbs, content types.

Custom and core objects are handled alike as dicts, so what the pure layers build is what
goes on the wire. Server-side apply always uses the operator's own field manager.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kvtier.kube.wire import decode
from kvtier.names import FIELD_MANAGER
from kvtier.targets.registry import KINDS

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# How often the client's token refresh runs. Its loaders renew a token 5 minutes before a
# kubeconfig token expires and re-read the service-account token file every minute, so
# 10 s loses nothing; running it per request re-reads the proxy environment each time.
TOKEN_REFRESH_SECONDS = 10.0

RefreshHook = Callable[[client.Configuration], None]
P = ParamSpec("P")


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API."""

    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        group_path = (
            f"/api/{self.api_version}"
            if "/" not in self.api_version
            else f"/apis/{self.api_version}"
        )
        parts = [group_path]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if sub:
            parts.append(sub)
        return "/".join(parts)


# The kinds kvtier reads or writes, the target kinds from their registry (every target is
# namespaced: it lives in its tier's namespace). Versions of a group share a plural.
PLURALS: dict[str, tuple[str, bool]] = {
    "KVCacheTier": ("kvcachetiers", True),
    "KVCachePolicy": ("kvcachepolicies", False),
    **{k.kind: (k.plural, True) for k in KINDS},
    **{r.kind: (r.plural, r.namespaced) for k in KINDS for r in k.reads},
    "LLMInferenceServiceConfig": ("llminferenceserviceconfigs", True),
    "PersistentVolume": ("persistentvolumes", False),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "StorageClass": ("storageclasses", False),
    "CSIStorageCapacity": ("csistoragecapacities", True),
    "Job": ("jobs", True),
    "Deployment": ("deployments", True),
    "Pod": ("pods", True),
    "ConfigMap": ("configmaps", True),
    "Node": ("nodes", False),
    "Event": ("events", True),
    "Lease": ("leases", True),
    "CephFilesystem": ("cephfilesystems", True),
}


def resource(api_version: str, kind: str) -> Resource:
    try:
        plural, namespaced = PLURALS[kind]
    except KeyError:
        raise ValueError(f"kvtier does not handle kind {kind}") from None
    return Resource(api_version, plural, namespaced)


def load_client(kubeconfig: str | None = None, pool_size: int | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig, else the in-cluster service account; `pool_size`
    connections are kept open for reuse (the client's default is 5 per core)."""
    settings = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=settings)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config(client_configuration=settings)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=settings)  # type: ignore[no-untyped-call]
    if pool_size is not None:
        settings.connection_pool_maxsize = pool_size
    hook: RefreshHook | None = settings.refresh_api_key_hook
    if hook is not None:
        settings.refresh_api_key_hook = throttled(hook)  # type: ignore[assignment]  # typed None
    return client.ApiClient(settings)


def throttled(
    hook: RefreshHook,
    every: float = TOKEN_REFRESH_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> RefreshHook:
    """`hook`, run at most once per `every` seconds (the first call always runs it). The
    client's loaders install a new hook each time theirs runs: that one runs next time."""
    inner = hook
    last: float | None = None

    def refresh(settings: client.Configuration) -> None:
        nonlocal inner, last
        now = clock()
        if last is not None and now - last < every:
            return
        last = now
        inner(settings)
        installed: RefreshHook | None = settings.refresh_api_key_hook
        if installed is not None and installed is not refresh:
            inner = installed
            settings.refresh_api_key_hook = refresh  # type: ignore[assignment]  # typed None there

    return refresh


# The verbs as requests, shared by the threads' client (Kube) and the event loop's
# (kube/aio.py): one place says what each write sends.


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any = None
    content_type: str = "application/json"
    query: Mapping[str, str] | None = None


def get_request(api_version: str, kind: str, name: str, namespace: str | None) -> Request:
    return Request("GET", resource(api_version, kind).path(namespace, name))


def apply_request(body: Mapping[str, Any], *, force: bool = True) -> Request:
    """Server-side apply of the fields in `body`, owned by kvtier's field manager (sent as
    JSON, which is YAML)."""
    meta = body["metadata"]
    res = resource(body["apiVersion"], body["kind"])
    query = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
    return Request("PATCH", res.path(meta.get("namespace"), meta["name"]), body, APPLY, query)


def status_request(
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    status: Mapping[str, Any],
    resource_version: str | None,
) -> Request:
    """A merge patch of the status; with a resourceVersion it fails (409) if that is stale."""
    body: dict[str, Any] = {"status": status}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    path = resource(api_version, kind).path(namespace, name, "status")
    return Request("PATCH", path, body, MERGE)


def merge_patch_request(
    api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
) -> Request:
    return Request("PATCH", resource(api_version, kind).path(namespace, name), patch, MERGE)


def json_patch_request(
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    ops: Sequence[Mapping[str, Any]],
) -> Request:
    """A JSON patch (RFC 6902) by kvtier's field manager; a failed `test` op is a 422."""
    return Request(
        "PATCH",
        resource(api_version, kind).path(namespace, name),
        list(ops),  # a list: the official client sends anything else as a strategic merge patch
        JSON_PATCH,
        {"fieldManager": FIELD_MANAGER},
    )


def create_request(body: Mapping[str, Any]) -> Request:
    res = resource(body["apiVersion"], body["kind"])
    return Request("POST", res.path(body["metadata"].get("namespace")), body)


def delete_request(
    api_version: str, kind: str, name: str, namespace: str | None, propagation: str
) -> Request:
    return Request(
        "DELETE",
        resource(api_version, kind).path(namespace, name),
        {"propagationPolicy": propagation},
    )


def sync_verb(build: Callable[P, Request]) -> Callable[Concatenate[Kube, P], Any]:
    """A method sending what `build` makes of its arguments (kube/aio.py has the event
    loop's twin)."""

    def verb(self: Kube, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        return self.send(build(*args, **kwargs))

    verb.__doc__ = build.__doc__
    return verb


class Kube:
    """JSON requests against one API server."""

    def __init__(self, api: client.ApiClient, timeout: float = 30) -> None:
        self.api = api
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        serialized = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        _, url, hdrs, data, _ = serialized
        resp = self.api.call_api(
            method, url, header_params=hdrs, body=data, _request_timeout=self.timeout
        )
        raw = resp.read()  # type: ignore[no-untyped-call]
        if not 200 <= resp.status <= 299:
            raise ApiException(http_resp=resp)
        return decode(raw) if raw else None

    def stream(
        self, path: str, query: Mapping[str, str], read_timeout: float
    ) -> Iterator[list[bytes]]:
        """A watch: its JSON lines as they arrive, a list per read."""
        _, url, headers, _, _ = self.api.param_serialize(
            "GET",
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = self.api.rest_client.pool_manager.request(
            "GET",
            url,
            headers=headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=read_timeout),
        )
        try:
            if not 200 <= resp.status <= 299:
                error = ApiException(status=resp.status, reason=resp.reason)
                error.body = resp.read().decode(errors="replace")
                raise error
            pending = b""
            for chunk in resp.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines:
                    yield [line for line in lines if line.strip()]
        finally:  # a stream left part-read cannot go back to the pool
            resp.close()
            resp.release_conn()

    def send(self, r: Request) -> Any:
        body = r.body
        if r.content_type == APPLY and not isinstance(body, str):
            body = json.dumps(body)  # as text: the official client would take it for a model
        return self.request(r.method, r.path, body, content_type=r.content_type, query=r.query)

    apply = sync_verb(apply_request)
    patch_status = sync_verb(status_request)
    merge_patch = sync_verb(merge_patch_request)
    json_patch = sync_verb(json_patch_request)
    create = sync_verb(create_request)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        """The object, or None when it does not exist."""
        try:
            return self.send(get_request(api_version, kind, name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        out = self.request("GET", resource(api_version, kind).path(namespace), query=query)
        items: list[dict[str, Any]] = out.get("items", []) if out else []
        return items

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Delete; False when it was already gone."""
        try:
            self.send(delete_request(api_version, kind, name, namespace, propagation))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True
