"""The schema watch: hashes from /openapi/v3's index, changes, and what the controller does."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client

from kvtier.controller.controller import Controller
from kvtier.controller.schemas import SchemaWatch, changed_groups, schema_hashes
from kvtier.kube.rest import Kube
from kvtier.policy.provisioning import Unkept
from localcluster import upstream_crds
from tests.served_schemas import document


def _index(hashes: dict[str, str]) -> dict[str, Any]:
    """The shape of GET /openapi/v3: a path per group version, its URL carrying the hash."""
    paths = {
        f"apis/{gv}": {"serverRelativeURL": f"/openapi/v3/apis/{gv}?hash={h}"}
        for gv, h in hashes.items()
    }
    return {"paths": {**paths, "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=CORE"}}}


def test_hashes_of_the_watched_groups_only() -> None:
    index = _index({"serving.kserve.io/v1beta1": "A", "ceph.rook.io/v1": "B", "apps/v1": "C"})
    assert schema_hashes(index, {"serving.kserve.io", "ceph.rook.io"}) == {
        "serving.kserve.io/v1beta1": "A",
        "ceph.rook.io/v1": "B",
    }
    assert schema_hashes({"paths": "junk"}, {"serving.kserve.io"}) == {}


def test_changes_count_new_gone_and_rehashed_versions() -> None:
    before = {"serving.kserve.io/v1beta1": "A", "ceph.rook.io/v1": "B"}
    assert changed_groups(before, dict(before)) == set()
    assert changed_groups(before, {**before, "ceph.rook.io/v1": "B2"}) == {"ceph.rook.io"}
    assert changed_groups(before, {**before, "serving.kserve.io/v1alpha2": "D"}) == {
        "serving.kserve.io"
    }
    assert changed_groups(before, {"ceph.rook.io/v1": "B"}) == {"serving.kserve.io"}


def test_the_first_read_records_and_a_failed_read_never_stops_the_watch() -> None:
    reads = [_index({"serving.kserve.io/v1beta1": h}) for h in ("A", "B")]
    seen: list[set[str]] = []
    watch = SchemaWatch(lambda: reads.pop(0), seen.append, interval=0.01)
    assert watch.check() == set() and seen == []
    assert watch.check() == {"serving.kserve.io"} and seen == [{"serving.kserve.io"}]

    async def run_briefly() -> None:
        task = asyncio.create_task(watch.run())  # reads.pop now raises IndexError each tick
        await asyncio.sleep(0.05)
        assert not task.done()
        task.cancel()

    asyncio.run(run_briefly())


def test_a_schema_change_releases_held_writes_of_its_group_only() -> None:
    controller = Controller(Kube(client.ApiClient()))
    kserve = ("InferenceService", "ns", "srv", "Patch")
    rook = ("CephFilesystem", "rook", "kv", "Apply")
    controller.writer.unkept = {
        kserve: Unkept("f1", 3, ("spec.x",), "serving.kserve.io/v1beta1"),
        rook: Unkept("f2", 1, ("spec.y",), "ceph.rook.io/v1"),
    }
    controller.schemas_changed({"serving.kserve.io"})
    assert list(controller.writer.unkept) == [rook]


def test_a_gone_tier_leaves_no_memo_of_its_objects() -> None:
    controller = Controller(Kube(client.ApiClient()))
    key = ("InferenceService", "ns", "srv", "Patch")
    controller.writer.unkept = {key: Unkept("f1", 3, ("spec.x",), "serving.kserve.io/v1beta1")}
    controller.writer.forget_unkept({"kind": "InferenceService", "metadata": {"name": "other"}})
    assert key in controller.writer.unkept
    controller.writer.forget_unkept(
        {"kind": "InferenceService", "metadata": {"namespace": "ns", "name": "srv"}}
    )
    assert controller.writer.unkept == {}


def _document(map_type: str) -> dict[str, Any]:
    gvk = [{"group": "serving.kserve.io", "version": "v1beta1", "kind": "InferenceService"}]
    spec = {"type": "object", "x-kubernetes-map-type": map_type}
    return {
        "components": {
            "schemas": {
                "isvc": {"x-kubernetes-group-version-kind": gvk, "properties": {"spec": spec}}
            }
        }
    }


def test_schema_of_reads_each_document_once_per_hash() -> None:
    hashes = {"serving.kserve.io/v1beta1": "A"}
    documents = {"A": _document("granular"), "B": _document("atomic")}
    read: list[str] = []

    def read_document(url: str) -> dict[str, Any]:
        read.append(url)
        return documents[url.rsplit("=", 1)[1]]

    watch = SchemaWatch(lambda: _index(hashes), lambda _: None, read_document=read_document)
    api = ("serving.kserve.io/v1beta1", "InferenceService")
    first = watch.schema_of(*api)
    assert first == {}  # a granular spec: nothing in its merge shape
    assert watch.schema_of(*api) == first
    assert read == ["/openapi/v3/apis/serving.kserve.io/v1beta1?hash=A"]
    # A CRD replaced: the index names a new hash, and the new document is read at once
    # when the caller asks for a fresh index (the controller does before applying).
    hashes["serving.kserve.io/v1beta1"] = "B"
    assert watch.schema_of(*api) == first  # the index as of the last read
    watch.index = None
    fresh = watch.schema_of(*api)
    assert fresh == {"properties": {"spec": {"x-kubernetes-map-type": "atomic"}}}
    assert len(watch.schemas) == 1  # the old document's schema is not kept
    assert watch.schema_of("serving.kserve.io/v1alpha9", "InferenceService") is None


def test_kinds_of_one_document_are_read_once() -> None:
    """Two kinds asked of one group version's document (an InferenceService tier asks every
    version of KServe's group, an LLMInferenceService tier too): the document is read and
    each kind resolved once, not once per kind asked for in turn."""
    hashes = {"serving.kserve.io/v1beta1": "A"}
    read: list[str] = []

    def read_document(url: str) -> dict[str, Any]:
        read.append(url)
        return _document("granular")

    watch = SchemaWatch(lambda: _index(hashes), lambda _: None, read_document=read_document)
    for _ in range(3):
        assert watch.schema_of("serving.kserve.io/v1beta1", "InferenceService") is not None
        assert watch.schema_of("serving.kserve.io/v1beta1", "LLMInferenceService") is None
    # One read, however often they alternate: the document says which kinds it defines.
    assert len(read) == 1


def test_schema_of_is_none_when_it_cannot_be_read() -> None:
    def fail(_: str) -> dict[str, Any]:
        raise client.ApiException(status=503)

    watch = SchemaWatch(
        lambda: _index({"serving.kserve.io/v1beta1": "A"}), lambda _: None, read_document=fail
    )
    assert watch.schema_of("serving.kserve.io/v1beta1", "InferenceService") is None
    assert SchemaWatch(lambda: {}, lambda _: None).schema_of("v1", "Pod") is None


def test_schemas_of_reads_every_version_of_the_group() -> None:
    hashes = {"serving.kserve.io/v1beta1": "A", "serving.kserve.io/v1alpha1": "B", "apps/v1": "C"}
    documents = {"A": _document("granular"), "B": {"components": {"schemas": {}}}}
    watch = SchemaWatch(
        lambda: _index(hashes),
        lambda _: None,
        read_document=lambda url: documents[url.rsplit("=", 1)[1]],
    )
    found = watch.schemas_of("serving.kserve.io/v1beta1", "InferenceService")
    assert list(found) == ["serving.kserve.io/v1beta1"]  # v1alpha1 has no such kind

    def fail() -> dict[str, Any]:
        raise client.ApiException(status=503)

    assert (
        SchemaWatch(fail, lambda _: None, read_document=lambda _: {}).schemas_of("a/v1", "X") == {}
    )


def test_cached_schemas_answer_as_schemas_of_without_a_read() -> None:
    """A reconcile asks for its target's schemas without leaving the event loop once they
    are in hand: the same answer as schemas_of, and None (ask schemas_of) while a read is
    needed: no index yet, a document not read, a new hash."""
    hashes = {"serving.kserve.io/v1beta1": "A", "serving.kserve.io/v1alpha1": "B", "apps/v1": "C"}
    documents = {"A": _document("granular"), "B": {"components": {"schemas": {}}}}
    watch = SchemaWatch(
        lambda: _index(hashes),
        lambda _: None,
        read_document=lambda url: documents[url.rsplit("=", 1)[1]],
    )
    api = ("serving.kserve.io/v1beta1", "InferenceService")
    assert watch.cached_schemas_of(*api) is None  # no index yet
    watch.index = watch.read_index()
    assert watch.cached_schemas_of(*api) is None  # documents not read
    found = watch.schemas_of(*api)
    assert watch.cached_schemas_of(*api) == found
    assert list(found) == ["serving.kserve.io/v1beta1"]
    assert watch.cached_schemas_of("serving.kserve.io/v1beta1", "LLMInferenceService") == {}
    hashes["serving.kserve.io/v1beta1"] = "B"
    watch.index = watch.read_index()
    assert watch.cached_schemas_of(*api) is None  # a new document to read
    assert SchemaWatch(lambda: {}, lambda _: None).cached_schemas_of(*api) is None


def test_the_versions_a_kind_is_served_in_come_from_kserves_real_crds() -> None:
    """KServe v0.20's CRDs: InferenceService in v1beta1 only, LLMInferenceService in v1alpha1
    and v1alpha2. A document that cannot be read makes the answer unknown (None), never a
    version "not served"."""
    crds = upstream_crds("full")
    components: dict[str, Any] = {}
    for name in (
        "serving.kserve.io_inferenceservices.yaml",
        "serving.kserve.io_llminferenceservices.yaml",
    ):
        components.update(document(crds / name)["components"]["schemas"])
    versions = ("v1alpha1", "v1alpha2", "v1beta1")
    index = _index({f"serving.kserve.io/{v}": v.upper() for v in versions})
    failing: set[str] = set()

    def read(url: str) -> dict[str, Any]:
        if any(v in url for v in failing):
            raise OSError("connection reset")
        return {"components": {"schemas": components}}

    watch = SchemaWatch(lambda: index, lambda _: None, read_document=read)
    assert watch.served_versions("serving.kserve.io", "InferenceService") == (
        "serving.kserve.io/v1beta1",
    )
    assert watch.served_versions("serving.kserve.io", "LLMInferenceService") == (
        "serving.kserve.io/v1alpha1",
        "serving.kserve.io/v1alpha2",
    )
    assert watch.served_versions("example.com", "InferenceService") == ()
    fresh = SchemaWatch(lambda: index, lambda _: None, read_document=read)
    failing.add("v1alpha2")
    assert fresh.served_versions("serving.kserve.io", "InferenceService") is None

    def down() -> dict[str, Any]:
        raise OSError("the API server is restarting")

    broken = SchemaWatch(down, lambda _: None, read_document=read)
    assert broken.served_versions("serving.kserve.io", "InferenceService") is None


def test_a_fresh_read_serves_every_worker_that_asked_before_it_began() -> None:
    """Before applying to a target a worker wants the index as of now: one read while it
    waited that began after it asked is as fresh as its own, so workers asking together
    share it; one that began before it asked is not. The reads leave from the event loop."""
    hashes = {"serving.kserve.io/v1beta1": "A"}
    reads: list[int] = []
    api = ("serving.kserve.io/v1beta1", "InferenceService")

    async def scenario() -> list[dict[str, Any]]:
        first_read_started, release_first = asyncio.Event(), asyncio.Event()

        async def read_index_now() -> dict[str, Any]:
            reads.append(len(reads))
            if len(reads) == 1:
                first_read_started.set()
                await release_first.wait()
            return _index(hashes)

        def never() -> dict[str, Any]:
            raise AssertionError("the ticks' reader is not the one a fresh read takes")

        watch = SchemaWatch(
            never,
            lambda _: None,
            read_document=lambda _: _document("granular"),
            read_index_now=read_index_now,
        )
        first = asyncio.create_task(watch.fresh_schemas_of(*api))
        await first_read_started.wait()
        # Two more ask while the first read is under way: it began before they asked.
        waiting = [asyncio.create_task(watch.fresh_schemas_of(*api)) for _ in range(2)]
        await asyncio.sleep(0.01)
        release_first.set()
        results = await asyncio.gather(first, *waiting)
        assert len(reads) == 2  # the first, and one shared by the two that waited
        await watch.fresh_schemas_of(*api)
        assert len(reads) == 3  # asked alone, afterwards: read anew
        return results

    results = asyncio.run(scenario())
    assert len(results) == 3 and all(list(r) == ["serving.kserve.io/v1beta1"] for r in results)


def test_a_fresh_read_that_fails_answers_nothing() -> None:
    def fail() -> dict[str, Any]:
        raise client.ApiException(status=503)

    watch = SchemaWatch(fail, lambda _: None, read_document=lambda _: {})
    api = ("serving.kserve.io/v1beta1", "InferenceService")
    assert asyncio.run(watch.fresh_schemas_of(*api)) == {}
    assert watch.index is None
