"""The operator's informers against the real API server: LIST, then every change in order;
a LIST after a gap reports what was deleted meanwhile; a kind not served is simply empty."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from kvtier.kube.informer import Informer, Watched
from kvtier.kube.rest import Kube
from tests.e2e.kube_helpers import new_namespace

Seen = list[tuple[str, str, str]]  # (event, name, data value)


def _configmap(ns: str, name: str, label: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"kvtier-test": label}},
        "data": {"v": value},
    }


def _recorder(seen: Seen, typed: list[bool]) -> Callable[[str, dict[str, Any]], None]:
    def deliver(event: str, obj: dict[str, Any]) -> None:
        typed.append(obj.get("apiVersion") == "v1" and obj.get("kind") == "ConfigMap")
        seen.append((event, obj["metadata"]["name"], (obj.get("data") or {}).get("v", "")))

    return deliver


async def _until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_lists_then_delivers_every_change_in_order(admin_api: client.ApiClient) -> None:
    kube = Kube(admin_api)
    ns = new_namespace(admin_api, "informer")
    label = uuid.uuid4().hex[:8]
    kube.create(_configmap(ns, "before", label, "0"))
    kube.create(_configmap(ns, "unlabelled", "other", "0"))
    seen: Seen = []
    typed: list[bool] = []

    async def run() -> None:
        informer = Informer(
            kube,
            Watched("v1", "ConfigMap", f"kvtier-test={label}"),
            _recorder(seen, typed),
            asyncio.get_running_loop(),
        )
        informer.start()
        await _until(informer.synced.is_set)
        await _until(lambda: len(seen) == 1)
        await asyncio.to_thread(kube.create, _configmap(ns, "after", label, "1"))
        for value in ("2", "3"):
            await asyncio.to_thread(
                kube.merge_patch, "v1", "ConfigMap", "before", ns, {"data": {"v": value}}
            )
        await asyncio.to_thread(kube.delete, "v1", "ConfigMap", "after", ns)
        await _until(lambda: len(seen) == 5)
        informer.stop()

    asyncio.run(run())
    assert seen == [
        ("ADDED", "before", "0"),
        ("ADDED", "after", "1"),
        ("MODIFIED", "before", "2"),
        ("MODIFIED", "before", "3"),
        ("DELETED", "after", "1"),
    ]
    assert all(typed), "LIST items and watch objects both carry apiVersion and kind"


def test_a_list_after_a_gap_reports_what_was_deleted(admin_api: client.ApiClient) -> None:
    kube = Kube(admin_api)
    ns = new_namespace(admin_api, "informer")
    label = uuid.uuid4().hex[:8]
    for name in ("kept", "gone"):
        kube.create(_configmap(ns, name, label, "0"))
    seen: Seen = []

    async def run() -> None:
        informer = Informer(
            kube,
            Watched("v1", "ConfigMap", f"kvtier-test={label}"),
            _recorder(seen, []),
            asyncio.get_running_loop(),
        )
        # No watch in between: what a lost connection or an expired version leaves.
        await asyncio.to_thread(informer._list, True)
        await asyncio.to_thread(kube.delete, "v1", "ConfigMap", "gone", ns)
        await asyncio.to_thread(informer._list, True)
        await _until(lambda: len(seen) == 4)

    asyncio.run(run())
    assert sorted(seen[:2]) == [("ADDED", "gone", "0"), ("ADDED", "kept", "0")]
    # The DELETED carries identity and labels, not the data (the view keeps no data).
    assert seen[2:] == [("ADDED", "kept", "0"), ("DELETED", "gone", "")]


def test_a_version_not_served_is_synced_and_empty(admin_api: client.ApiClient) -> None:
    seen: Seen = []

    async def run() -> None:
        informer = Informer(
            Kube(admin_api),
            Watched("serving.kserve.io/v1alpha9", "LLMInferenceService"),
            _recorder(seen, []),
            asyncio.get_running_loop(),
        )
        informer.start()
        await _until(informer.synced.is_set)
        informer.stop()

    asyncio.run(run())
    assert seen == []
