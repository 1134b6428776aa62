"""The running operator's requests, sent from its event loop (aiohttp).

The reconciles' writes, reads and Events go out from the event loop itself: no thread hand-off
per request (`asyncio.to_thread` cost about 0.35 ms of CPU a request more than this, and the
threads' turns at the GIL), with the same credentials, TLS settings, User-Agent and request
bodies as the official client's `Kube` (kube/rest.py builds both from one `Request`). The
informers, leader election and the CLI keep the threads' client.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec

import aiohttp
import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.kube.rest import (
    Request,
    apply_request,
    create_request,
    delete_request,
    get_request,
    json_patch_request,
    merge_patch_request,
    status_request,
)
from kvtier.kube.wire import decode


def ssl_context(settings: client.Configuration) -> ssl.SSLContext:
    """The TLS the official client would use: its CA (file or data), client certificate,
    verification and hostname checks."""
    context = ssl.create_default_context(
        cafile=settings.ssl_ca_cert or None, cadata=settings.ca_cert_data or None
    )
    if settings.cert_file:
        context.load_cert_chain(settings.cert_file, settings.key_file or None)
    if not settings.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif settings.assert_hostname is False:
        context.check_hostname = False
    return context


P = ParamSpec("P")


def _verb(build: Callable[P, Request]) -> Callable[Concatenate[AsyncKube, P], Awaitable[Any]]:
    """A method sending what `build` makes of its arguments: the verbs take the same
    arguments as the threads' client's (kube/rest.py)."""

    async def verb(self: AsyncKube, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        return await self.send(build(*args, **kwargs))

    verb.__doc__ = build.__doc__
    return verb


def encode(body: Any) -> bytes | None:
    """A request body as the official client sends it: text as given, anything else JSON."""
    if body is None:
        return None
    if isinstance(body, str):
        return body.encode()
    try:
        return orjson.dumps(body)
    except TypeError:  # what orjson refuses (an integer beyond 64 bits, say)
        return json.dumps(body).encode()


class AsyncKube:
    """JSON requests against one API server, from the event loop; the connection pool opens
    with the first request on a loop (a session belongs to the loop that opened it)."""

    def __init__(self, api: client.ApiClient, timeout: float = 30, connections: int = 10) -> None:
        self.settings: client.Configuration = api.configuration
        self.user_agent = str(api.user_agent)
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.connections = connections
        proxy = self.settings.proxy
        if proxy and str(proxy).startswith("socks"):
            raise ValueError(
                f"proxy {proxy}: the operator reaches the API server directly or "
                "through an HTTP proxy, not SOCKS"
            )
        self.proxy = proxy or None
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            scheme = str(self.settings.host).partition(":")[0]
            tls = ssl_context(self.settings) if scheme == "https" else False
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ssl=tls),
                timeout=self.timeout,
            )
            self._loop = loop
        return self._session

    async def close(self) -> None:
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None

    async def send(self, r: Request) -> Any:
        headers = {
            "Accept": "application/json",
            "Content-Type": r.content_type,
            "User-Agent": self.user_agent,
        }
        auth = self.settings.auth_settings().get("BearerToken")
        if auth and auth.get("value"):
            headers["authorization"] = str(auth["value"])
        async with self._open().request(
            r.method,
            f"{self.settings.host}{r.path}",
            params=dict(r.query or {}),
            data=encode(r.body),
            headers=headers,
            proxy=self.proxy,
            server_hostname=self.settings.tls_server_name or None,
        ) as resp:
            raw = await resp.read()
            if not 200 <= resp.status <= 299:
                error = ApiException(status=resp.status, reason=resp.reason)
                error.body = raw.decode(errors="replace")
                error.headers = dict(resp.headers)
                raise error
        return decode(raw) if raw else None

    apply = _verb(apply_request)
    patch_status = _verb(status_request)
    merge_patch = _verb(merge_patch_request)
    json_patch = _verb(json_patch_request)
    create = _verb(create_request)

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> Any:
        """The object, or None when it does not exist."""
        try:
            return await self.send(get_request(api_version, kind, name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
        """Delete (dependents in the background); False when it was already gone."""
        try:
            await self.send(delete_request(api_version, kind, name, namespace, "Background"))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True
