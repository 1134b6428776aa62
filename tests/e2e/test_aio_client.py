"""The event loop's client (kube/aio.py) against the real API server: the operator's token
and the admin's client certificate, what the API server records of a write (the same
manager and operation as the threads' client's), and its refusals as the ApiExceptions the
reconcilers read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.kube.aio import AsyncKube
from kvtier.kube.rest import Kube, Request
from kvtier.names import FIELD_MANAGER

from .kube_helpers import new_namespace


def _configmap(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


def _managers(obj: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    return {
        (m["manager"], m["operation"], m.get("subresource"))
        for m in obj["metadata"].get("managedFields") or []
    }


def test_writes_are_recorded_as_the_threads_clients_are(admin_api: client.ApiClient) -> None:
    """Apply, merge patch of a status and create, each once through either client: the API
    server records the same managers and operations (the field manager for applies, the
    User-Agent's for the other writes), so field ownership does not change with the client."""
    ns = new_namespace(admin_api, "aio")
    threads, loop = Kube(admin_api), AsyncKube(admin_api)

    async def through_the_loop() -> list[Any]:
        try:
            return [
                await loop.apply(_configmap(ns, "by-loop", a="1")),
                await loop.create(_configmap(ns, "created-by-loop", b="2")),
                await loop.merge_patch("v1", "ConfigMap", "by-loop", ns, {"data": {"c": "3"}}),
            ]
        finally:
            await loop.close()

    by_threads = [
        threads.apply(_configmap(ns, "by-threads", a="1")),
        threads.create(_configmap(ns, "created-by-threads", b="2")),
        threads.merge_patch("v1", "ConfigMap", "by-threads", ns, {"data": {"c": "3"}}),
    ]
    by_loop = asyncio.run(through_the_loop())
    assert [o["data"] for o in by_loop] == [o["data"] for o in by_threads]
    assert [_managers(o) for o in by_loop] == [_managers(o) for o in by_threads]
    assert (FIELD_MANAGER, "Apply", None) in _managers(by_loop[0])
    assert len(_managers(by_loop[2])) == 2  # the apply's and the patch's


def test_the_operators_token_and_its_limits(
    admin_api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    """With the operator's service-account token: a Secret is out of its reach (a 403 that
    says what was refused); a missing Job reads as None and deletes as False."""
    ns = new_namespace(admin_api, "aio")
    kube = AsyncKube(operator_api)

    async def scenario() -> tuple[ApiException | None, Any, bool]:
        refused = None
        try:
            try:
                await kube.send(Request("GET", f"/api/v1/namespaces/{ns}/secrets/s"))
            except ApiException as exc:
                refused = exc
            return (
                refused,
                await kube.get("batch/v1", "Job", "none", ns),
                await kube.delete("batch/v1", "Job", "none", ns),
            )
        finally:
            await kube.close()

    refused, missing, deleted = asyncio.run(scenario())
    assert refused is not None and refused.status == 403
    assert '"secrets"' in str(refused.body) and "kvtier-operator" in str(refused.body)
    assert missing is None
    assert deleted is False


def test_refusals_carry_status_and_message(admin_api: client.ApiClient) -> None:
    """With the admin's client certificate: an invalid body is a 422 naming the field; a
    write guarded by a resourceVersion the object has moved past is a 409."""
    ns = new_namespace(admin_api, "aio")
    first = Kube(admin_api).apply(_configmap(ns, "cm", a="1"))
    Kube(admin_api).apply(_configmap(ns, "cm", a="2"))
    kube = AsyncKube(admin_api)
    stale = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}}

    async def scenario() -> list[ApiException]:
        refused = []
        try:
            for call in (
                kube.apply(_configmap(ns, "BAD_NAME", k="v")),
                kube.merge_patch("v1", "ConfigMap", "cm", ns, {**stale, "data": {"a": "3"}}),
            ):
                with pytest.raises(ApiException) as err:
                    await call
                refused.append(err.value)
        finally:
            await kube.close()
        return refused

    invalid, conflict = asyncio.run(scenario())
    assert invalid.status == 422 and "metadata.name" in str(invalid.body)
    assert conflict.status == 409 and "the object has been modified" in str(conflict.body)
    assert Kube(admin_api).get("v1", "ConfigMap", "cm", ns)["data"] == {"a": "2"}
