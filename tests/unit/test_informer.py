"""How an informer reads one watch event (the stream itself is tested in tests/e2e)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kvtier.kube.informer import Gone, Informer, Watched
from kvtier.kube.rest import Kube


@pytest.fixture
def informer() -> Iterator[Informer]:
    loop = asyncio.new_event_loop()
    kube = Kube(None)  # type: ignore[arg-type]  # these tests never reach the API
    yield Informer(kube, Watched("v1", "Node"), lambda event, obj: None, loop)
    loop.close()


def _node(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


def test_changes_are_typed_and_advance_the_version(informer: Informer) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    version = informer._apply({"type": "ADDED", "object": _node("a", "7")}, events, "5")
    version = informer._apply({"type": "DELETED", "object": _node("a", "9")}, events, version)
    assert version == "9"
    assert [(e, o["kind"], o["apiVersion"]) for e, o in events] == [
        ("ADDED", "Node", "v1"),
        ("DELETED", "Node", "v1"),
    ]


def test_a_bookmark_moves_the_version_and_delivers_nothing(informer: Informer) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    assert informer._apply(bookmark, events, "5") == "42"
    assert events == []


def test_an_expired_version_means_list_again(informer: Informer) -> None:
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    with pytest.raises(Gone):
        informer._apply(expired, [], "5")


def test_any_other_watch_error_is_raised_with_its_message(informer: Informer) -> None:
    failed = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd"}}
    with pytest.raises(RuntimeError, match="watch error: etcd"):
        informer._apply(failed, [], "5")


def test_a_failing_handler_does_not_stop_the_others() -> None:
    seen: list[str] = []

    def deliver(event: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise ValueError("bad object")
        seen.append(obj["metadata"]["name"])

    loop = asyncio.new_event_loop()
    informer = Informer(Kube(None), Watched("v1", "Node"), deliver, loop)  # type: ignore[arg-type]
    informer._dispatch([("ADDED", _node("bad", "1")), ("ADDED", _node("good", "2"))])
    loop.close()
    assert seen == ["good"]


def test_managed_fields_are_kept_only_where_they_are_read() -> None:
    """A watch of a kind whose field ownership nothing reads delivers its objects without
    metadata.managedFields (a target's watch keeps them: they say which parts are the
    user's)."""
    loop = asyncio.new_event_loop()
    kube = Kube(None)  # type: ignore[arg-type]  # never reaches the API
    stripped = Informer(kube, Watched("v1", "Node", managed_fields=False), lambda e, o: None, loop)
    kept = Informer(kube, Watched("v1", "Node"), lambda e, o: None, loop)
    loop.close()
    entries = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    for informer, expected in ((stripped, None), (kept, entries)):
        node = _node("a", "7")
        node["metadata"]["managedFields"] = list(entries)
        events: list[tuple[str, dict[str, Any]]] = []
        informer._apply({"type": "ADDED", "object": node}, events, "5")
        assert events[0][1]["metadata"].get("managedFields") == expected
        assert events[0][1]["metadata"]["resourceVersion"] == "7"


def test_an_object_gone_while_disconnected_carries_only_the_spec_its_handler_reads() -> None:
    """The informer's view of each object keeps identity, labels and the spec fields its
    Watched names, not a second copy of every spec beside the cache's: a LIST after a gap
    delivers DELETED with just those (a tier's targetRef; nothing of a target's spec)."""
    loop = asyncio.new_event_loop()
    delivered: list[tuple[str, dict[str, Any]]] = []
    kube = Kube(None)  # type: ignore[arg-type]  # never reaches the API
    tiers = Watched("kvcache.io/v1alpha1", "KVCacheTier", spec_when_gone=("targetRef",))
    targets = Watched("apps/v1", "Deployment")
    ref = {"kind": "Deployment", "name": "srv"}
    for watched, expected in ((tiers, {"targetRef": ref}), (targets, None)):
        informer = Informer(kube, watched, lambda e, o: delivered.append((e, o)), loop)
        big = {"targetRef": ref, "cpu": {"size": "20Gi"}, "template": {"x": "y" * 1000}}
        obj = {"metadata": {"name": "t", "namespace": "llm", "labels": {"a": "b"}}, "spec": big}
        informer._replace([obj])
        loop.run_until_complete(asyncio.sleep(0))
        assert informer._known[("llm", "t")].get("spec") == expected
        delivered.clear()
        informer._replace([])  # the next LIST, after a gap: it is gone
        loop.run_until_complete(asyncio.sleep(0))  # the loop delivers what the thread sent
        [(event, gone)] = delivered
        assert event == "DELETED" and gone["metadata"]["labels"] == {"a": "b"}
        assert gone.get("spec") == expected
    loop.close()
