"""The writer's one path (controller/writer.py), taken by a tier's writes and the policy's:
every write counted in kvtier_api_writes_total by verb and kind, in order, the first failure
stopping the rest; each reconciler keeps its own refusals (a 403 scheduler ConfigMap for a
tier, a 404 CephFilesystem for the policy)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from kvtier.controller.controller import Controller
from kvtier.controller.policy_reconciler import POLICY_KEY
from kvtier.names.labels import TIER_ID
from kvtier.names.objects import tier_id
from kvtier.policy.replica1 import CONDITION, RECHECK_SECONDS
from kvtier.render import DesiredWrite

Key = tuple[str, str | None, str]


class FakeKube:
    """The calls the writer and the reconcilers make, answered from `objects`; `fail` makes
    a (verb, kind) answer with that HTTP status; `prune` drops top-level fields from what an
    apply of that kind answers (a schema that does not keep them)."""

    def __init__(self, fail: dict[tuple[str, str], int] | None = None) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.fail = fail or {}
        self.prune: dict[str, str] = {}
        self.sent: list[tuple[str, str, str]] = []  # (verb, kind, name), as asked

    def _check(self, verb: str, kind: str, name: str) -> None:
        self.sent.append((verb, kind, name))
        status = self.fail.get((verb, kind))
        if status is not None:
            raise ApiException(status=status, reason=f"{verb} {kind} refused")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def list(self, api_version: str, kind: str, namespace: str | None = None, *_: Any) -> Any:
        return []

    def apply(self, body: dict[str, Any], **_: Any) -> Any:
        meta = body["metadata"]
        self._check("apply", body["kind"], meta["name"])
        answer = copy.deepcopy(body)
        answer["metadata"]["generation"] = 1
        answer.pop(self.prune.get(body["kind"], ""), None)
        self.objects[(body["kind"], meta.get("namespace"), meta["name"])] = answer
        return copy.deepcopy(answer)

    def json_patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, ops: Any
    ) -> Any:
        self._check("patch", kind, name)
        return self.get(api_version, kind, name, namespace)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> None:
        self._check("delete", kind, name)
        self.objects.pop((kind, namespace, name), None)

    def create(self, body: dict[str, Any]) -> Any:
        self._check("create", body["kind"], body["metadata"]["name"])
        return body

    def patch_status(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: dict[str, Any],
        resource_version: str | None = None,
    ) -> Any:
        self._check("patch", f"{kind}/status", name)
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **patch}


class FakeAio:
    """The event loop's client (kube/aio.py) over the same objects: the same verbs, awaited."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def __getattr__(self, verb: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self.kube, verb)

        async def awaited(*args: Any, **kwargs: Any) -> Any:
            return call(*args, **kwargs)

        return awaited


def writes_total(verb: str, kind: str) -> float:
    labels = {"verb": verb, "kind": kind}
    return REGISTRY.get_sample_value("kvtier_api_writes_total", labels) or 0.0


def counts(*labels: tuple[str, str]) -> list[float]:
    return [writes_total(verb, kind) for verb, kind in labels]


NS = "llm"
TIER = {
    "apiVersion": "kvcache.io/v1alpha1",
    "kind": "KVCacheTier",
    "metadata": {"name": "t", "namespace": NS, "resourceVersion": "3"},
    "spec": {"targetRef": {"kind": "InferenceService", "name": "srv"}},
}
OWNED = {TIER_ID: tier_id(NS, "t")}


def _apply(kind: str, name: str, **body: Any) -> DesiredWrite:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": NS}}
    obj["metadata"]["labels"] = dict(OWNED)
    return DesiredWrite("Apply", "v1", kind, name, NS, {**obj, **body}, f"{kind} {name}")


def _controller(kube: FakeKube) -> Controller:
    controller = Controller(kube, aio=FakeAio(kube))  # type: ignore[arg-type]
    controller.cache.set_tier((NS, "t"), copy.deepcopy(TIER))
    return controller


def test_tier_writes_are_sent_in_order_counted_and_their_answers_cached() -> None:
    kube = FakeKube()
    controller = _controller(kube)
    kube.objects[("Service", NS, "old")] = {"kind": "Service", "metadata": {"name": "old"}}
    controller.cache.set_owned(
        {"kind": "Service", "metadata": {"name": "old", "namespace": NS, "labels": OWNED}},
        deleted=False,
    )
    writes = [
        _apply("PersistentVolumeClaim", "a", spec={"resources": {}}),
        DesiredWrite("Delete", "v1", "Service", "old", NS, {}, "Service old: gone"),
        DesiredWrite("Patch", "v1", "Secret", "s", NS, {"jsonPatch": []}, "Secret s"),
    ]
    labels = (("apply", "PersistentVolumeClaim"), ("delete", "Service"), ("patch", "Secret"))
    before = counts(*labels)
    done = asyncio.run(controller._perform(controller.cache.tiers[(NS, "t")], writes))
    assert done == writes
    assert kube.sent == [
        ("apply", "PersistentVolumeClaim", "a"),
        ("delete", "Service", "old"),
        ("patch", "Secret", "s"),
    ]
    after = counts(*labels)
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]
    owned = controller.cache.owned_for(NS, "t")
    assert ("PersistentVolumeClaim", NS, "a") in owned and ("Service", NS, "old") not in owned


def test_a_failed_write_stops_the_sequence_and_what_went_through_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = FakeKube(fail={("apply", "Secret"): 500})
    controller = _controller(kube)
    told: list[list[DesiredWrite]] = []
    monkeypatch.setattr(
        controller, "_announce", lambda obj, events, written: told.append(list(written))
    )
    writes = [_apply("ConfigMap", "a"), _apply("Secret", "s"), _apply("ConfigMap", "b")]
    before = counts(("apply", "ConfigMap"), ("apply", "Secret"))
    with pytest.raises(ApiException):
        asyncio.run(controller._perform(controller.cache.tiers[(NS, "t")], writes))
    assert kube.sent == [("apply", "ConfigMap", "a"), ("apply", "Secret", "s")]
    after = counts(("apply", "ConfigMap"), ("apply", "Secret"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 0]  # a refused apply
    assert told == [[writes[0]]]


def test_a_guarded_patch_that_failed_refreshes_the_cache_and_is_counted() -> None:
    kube = FakeKube(fail={("patch", "ConfigMap"): 422})
    controller = _controller(kube)
    fresh = {
        "kind": "ConfigMap",
        "metadata": {"name": "epp", "namespace": NS, "resourceVersion": "9"},
    }
    kube.objects[("ConfigMap", NS, "epp")] = fresh
    patch = DesiredWrite("Patch", "v1", "ConfigMap", "epp", NS, {"jsonPatch": []}, "")
    before = writes_total("patch", "ConfigMap")
    with pytest.raises(ApiException):
        asyncio.run(controller.writer.perform([patch, _apply("Secret", "s")], []))
    assert writes_total("patch", "ConfigMap") - before == 1
    assert controller.cache.configmaps[(NS, "epp")] == fresh
    assert kube.sent == [("patch", "ConfigMap", "epp")]


def test_a_403_scheduler_configmap_is_set_aside_and_the_tier_goes_on() -> None:
    kube = FakeKube(fail={("patch", "ConfigMap"): 403})
    controller = _controller(kube)
    patch = DesiredWrite("Patch", "v1", "ConfigMap", "epp", NS, {"jsonPatch": []}, "")
    after = _apply("Secret", "s")

    async def perform() -> list[DesiredWrite]:  # the retry is scheduled on the running loop
        return await controller._perform(controller.cache.tiers[(NS, "t")], [patch, after])

    assert asyncio.run(perform()) == [after]
    assert (NS, "epp") in controller.forbidden
    assert kube.sent[-1] == ("apply", "Secret", "s")


def test_a_write_the_server_did_not_keep_is_remembered_for_tiers_only() -> None:
    kube = FakeKube()
    kube.prune["ConfigMap"] = "data"
    controller = _controller(kube)
    write = _apply("ConfigMap", "a", data={"k": "v"})
    asyncio.run(controller.writer.perform([write], []))
    assert list(controller.writer.unkept) == [("ConfigMap", NS, "a", "Apply")]
    controller.writer.unkept.clear()
    asyncio.run(controller.writer.perform([write], [], remember_unkept=False))
    assert controller.writer.unkept == {}


POLICY: dict[str, Any] = {
    "apiVersion": "kvcache.io/v1alpha1",
    "kind": "KVCachePolicy",
    "metadata": {"name": "cluster", "generation": 1, "resourceVersion": "7"},
    "spec": {
        "nvmePools": [
            {"name": p, "mountPath": f"/var/mnt/{p}", "capacityPerNode": "1Ti"} for p in "ab"
        ],
        "cephfs": {"replica1": {"enabled": True}},
    },
}
POLICY_WRITES = [
    ("apply", "StorageClass", "kvtier-nvme-a"),
    ("apply", "StorageClass", "kvtier-nvme-b"),
    ("apply", "CephFilesystem", "kvtier-kvcache"),
]


def _policy_controller(kube: FakeKube) -> Controller:
    controller = Controller(kube, aio=FakeAio(kube))  # type: ignore[arg-type]
    controller.cache.policy = copy.deepcopy(POLICY)
    return controller


def _conditions(controller: Controller) -> dict[str, str]:
    status = controller.cache.policy or {}
    return {c["type"]: c["reason"] for c in status.get("conditions") or []}


def test_the_policys_writes_are_counted_like_a_tiers() -> None:
    kube = FakeKube()
    controller = _policy_controller(kube)
    labels = (
        ("apply", "StorageClass"),
        ("apply", "CephFilesystem"),
        ("patch", "KVCachePolicy/status"),
    )
    before = counts(*labels)
    asyncio.run(controller.reconcile(POLICY_KEY))
    assert kube.sent == [*POLICY_WRITES, ("patch", "KVCachePolicy/status", "cluster")]
    after = counts(*labels)
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1, 1]
    assert _conditions(controller)[CONDITION] == "WaitingForFilesystem"
    assert controller.writer.unkept == {}  # the policy's decisions hold nothing back


def test_a_failed_policy_write_stops_the_sequence_and_writes_no_status() -> None:
    kube = FakeKube(fail={("apply", "StorageClass"): 500})
    controller = _policy_controller(kube)
    before = counts(("apply", "StorageClass"), ("apply", "CephFilesystem"))
    with pytest.raises(ApiException):
        asyncio.run(controller.reconcile(POLICY_KEY))
    assert kube.sent == POLICY_WRITES[:1]
    assert counts(("apply", "StorageClass"), ("apply", "CephFilesystem")) == before
    assert controller.cache.policy == POLICY


def test_a_filesystem_without_a_place_is_the_condition_and_a_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = FakeKube(fail={("apply", "CephFilesystem"): 404})
    controller = _policy_controller(kube)
    later: list[tuple[Any, float]] = []
    monkeypatch.setattr(
        controller.queue, "add_after", lambda key, delay: later.append((key, delay))
    )
    before = counts(("apply", "StorageClass"), ("apply", "CephFilesystem"))
    asyncio.run(controller.reconcile(POLICY_KEY))
    assert kube.sent == [*POLICY_WRITES, ("patch", "KVCachePolicy/status", "cluster")]
    after = counts(("apply", "StorageClass"), ("apply", "CephFilesystem"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 0]
    assert _conditions(controller)[CONDITION] == "CephClusterNotFound"
    assert later == [(POLICY_KEY, RECHECK_SECONDS)]
