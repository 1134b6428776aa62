"""The operator's watch cache: reverse indexes follow the tiers; metrics forget exactly a tier."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from kvtier import metrics
from kvtier.controller.cache import Cache, is_news
from kvtier.names.objects import tier_id


def tier(target: str, config_map: str | None = None) -> dict[str, Any]:
    model = {"configMapRef": {"name": config_map, "key": "config.json"}} if config_map else {}
    return {"spec": {"targetRef": {"kind": "InferenceService", "name": target}, "model": model}}


def test_indexes_follow_tier_changes() -> None:
    cache = Cache()
    cache.set_tier(("a", "t1"), tier("llama", "cfg"))
    cache.set_tier(("a", "t2"), tier("llama"))
    cache.set_tier(("b", "t3"), tier("llama"))
    assert cache.tiers_for_target("InferenceService", "a", "llama") == [("a", "t1"), ("a", "t2")]
    assert cache.tiers_for_configmap("a", "cfg") == [("a", "t1")]
    cache.set_tier(("a", "t1"), tier("other"))  # retargeted: the old entries go
    assert cache.tiers_for_target("InferenceService", "a", "llama") == [("a", "t2")]
    assert cache.tiers_for_configmap("a", "cfg") == []
    cache.pop_tier(("a", "t2"))
    assert cache.tiers_for_target("InferenceService", "a", "llama") == []
    owned = {
        "kind": "PersistentVolume",
        "metadata": {"name": "pv", "labels": {"kvcache.io/tier-id": tier_id("b", "t3")}},
    }
    assert cache.set_owned(owned, deleted=False) == ("b", "t3")
    assert cache.owned_for("b", "t3") == {("PersistentVolume", None, "pv"): owned}


def test_metrics_forget_only_the_tier() -> None:
    status = {
        "sizing": {"workingSetBytes": 10, "cpuBytesToUse": 5, "fitsInCPU": False},
        "tiers": [{"name": "nvme", "capacityBytes": 7, "probe": {"p99Seconds": 0.01}}],
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    metrics.observe_tier("ns", "keep", tier("x"), status)
    metrics.observe_tier("ns", "drop", tier("y"), status)
    metrics.forget_tier("ns", "drop")
    value = REGISTRY.get_sample_value
    assert (
        value("kvtier_probe_p99_seconds", {"namespace": "ns", "name": "keep", "tier": "nvme"})
        == 0.01
    )
    assert value("kvtier_tier_working_set_bytes", {"namespace": "ns", "name": "drop"}) is None
    assert value("kvtier_tier_ready", {"namespace": "ns", "name": "keep"}) == 1


def test_target_version_follows_the_cluster_not_event_order() -> None:
    cache = Cache()
    key = ("InferenceService", "a", "llama")
    lkey = ("LLMInferenceService", "a", "gpt")
    v1, v2 = "serving.kserve.io/v1alpha1", "serving.kserve.io/v1alpha2"
    cache.set_target(lkey, v1, {"apiVersion": v1})  # the older view's event came first
    llm = {
        "metadata": {"namespace": "a"},
        "spec": {"targetRef": {"kind": "LLMInferenceService", "name": "gpt"}},
    }
    cache.served = {"LLMInferenceService": {v1, v2}}
    assert cache.target_for(llm) is None  # wait for the served, newest view
    cache.set_target(lkey, v2, {"apiVersion": v2})
    assert cache.target_for(llm) == {"apiVersion": v2}
    pinned = {**llm, "spec": {"targetRef": {**llm["spec"]["targetRef"], "apiVersion": v1}}}
    assert cache.target_for(pinned) == {"apiVersion": v1}
    cache.served = {"LLMInferenceService": {v1}}
    assert cache.target_for(llm) == {"apiVersion": v1}
    assert key not in cache.targets


def _at(rv: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv, **extra}}


def test_only_a_newer_object_is_news() -> None:
    assert is_news(_at("5"), None)  # first sight
    assert is_news(_at("6"), _at("5"))
    assert not is_news(_at("5"), _at("5"))  # the echo of kvtier's own write
    assert not is_news(_at("4"), _at("5"))  # an event lagging behind that write
    assert is_news(_at("x"), _at("5"))  # not a number: never assume it is old
    assert is_news({"metadata": {}}, _at("5"))


def test_owned_copy_finds_what_a_write_left_in_the_cache() -> None:
    cache = Cache()
    cache.set_tier(("b", "t3"), tier("llama"))
    labels = {"kvcache.io/tier-id": tier_id("b", "t3")}
    written = {"kind": "PersistentVolume", **_at("9", name="pv", labels=labels)}
    cache.remember_written(written)
    echo = {"kind": "PersistentVolume", **_at("9", name="pv", labels=labels)}
    assert cache.owned_copy(echo) is written
    assert not is_news(echo, cache.owned_copy(echo))
    assert cache.owned_copy({"kind": "PersistentVolume", **_at("9", name="other")}) is None


def test_a_version_no_watch_feeds_is_read_when_missing_or_behind() -> None:
    cache = Cache()
    key = ("LLMInferenceService", "a", "gpt")
    v1, v2 = "serving.kserve.io/v1alpha1", "serving.kserve.io/v1alpha2"
    cache.watched = {"LLMInferenceService": v2}
    ref = {"kind": "LLMInferenceService", "name": "gpt"}
    plain = {"metadata": {"namespace": "a"}, "spec": {"targetRef": ref}}
    pinned = {"metadata": {"namespace": "a"}, "spec": {"targetRef": {**ref, "apiVersion": v1}}}
    assert cache.unwatched_version(pinned) is None  # no such object as far as the watch knows
    cache.set_target(key, v2, {"apiVersion": v2, **_at("7")})
    assert cache.unwatched_version(plain) is None  # the watched version itself
    assert cache.unwatched_version(pinned) == v1  # never read
    cache.set_target(key, v1, {"apiVersion": v1, **_at("7")})
    assert cache.unwatched_version(pinned) is None  # read at the watched version
    cache.set_target(key, v2, {"apiVersion": v2, **_at("9")})
    assert cache.unwatched_version(pinned) == v1  # the object changed since
    cache.watched = {}
    assert cache.unwatched_version(pinned) is None  # every version watched: nothing to read
    cache.forget_target(key)
    assert key not in cache.targets  # deleted: every version's view goes


def test_kvtiers_own_deployment_is_remembered_as_owned_never_as_a_target(
    monkeypatch: Any,
) -> None:
    """Where a registered target kind is also a kind kvtier writes for itself (a Deployment:
    the CephFS tiers' evictors), what it wrote is its own object, never a model server."""
    from types import SimpleNamespace

    from kvtier.controller import cache as module

    kind = SimpleNamespace(reads_picker_configs=False)
    monkeypatch.setattr(module, "registered", lambda name: kind if name == "Deployment" else None)
    cache = Cache()
    cache.set_tier(("b", "t3"), tier("llama"))
    labels = {"kvcache.io/tier-id": tier_id("b", "t3"), "app.kubernetes.io/managed-by": "kvtier"}
    evictor = {"apiVersion": "apps/v1", "kind": "Deployment", **_at("9", name="ev", labels=labels)}
    cache.remember_written(evictor)
    assert cache.owned_copy(evictor) is evictor
    assert not cache.targets
    user = {"apiVersion": "apps/v1", "kind": "Deployment", **_at("9", name="srv")}
    cache.remember_written(user)
    assert ("Deployment", user["metadata"].get("namespace", ""), "srv") in cache.targets


def test_cached_tiers_keep_no_managed_fields_and_share_equal_effective_rows() -> None:
    """A tier as the API returns it, cached: without managedFields (nothing reads a tier's),
    its status.effective rows the same objects as equal rows of other tiers, its status
    otherwise as returned."""
    cache = Cache()
    rows = [
        {"field": "mode", "value": "Apply", "source": "Default"},
        {"field": "cpu.size", "value": "auto", "source": "Tier"},
    ]
    for name in ("t1", "t2"):
        body = tier("llama")
        body["metadata"] = {"name": name, "managedFields": [{"manager": "kvtier-operator"}]}
        body["status"] = {"effective": [dict(r) for r in rows], "conditions": [{"type": "Ready"}]}
        cache.set_tier(("a", name), body)
    first, second = cache.tiers[("a", "t1")], cache.tiers[("a", "t2")]
    assert "managedFields" not in first["metadata"]
    assert first["status"] == {"effective": rows, "conditions": [{"type": "Ready"}]}
    assert second["status"]["effective"] == rows
    pairs = zip(first["status"]["effective"], second["status"]["effective"], strict=True)
    assert all(a is b for a, b in pairs)
    assert first["status"]["effective"] is not second["status"]["effective"]


def test_cached_targets_keep_the_managed_fields_that_are_read() -> None:
    """A target's managedFields tell which parts are the user's (targets/facts.py): the
    other managers' entries stay; kvtier's own and subresource entries go while one of those
    records fields, and are kept when none does."""
    from kvtier.targets.facts import foreign_versions, users_part

    def target(entries: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "serving.kserve.io/v1alpha2",
            "kind": "LLMInferenceService",
            "metadata": {"name": "m", "namespace": "a", "managedFields": entries},
            "spec": {"worker": {"containers": []}},
        }

    users = {
        "manager": "kubectl",
        "apiVersion": "serving.kserve.io/v1alpha1",
        "fieldsV1": {"f:spec": {"f:worker": {}}},
    }
    own = {"manager": "kvtier-operator", "fieldsV1": {"f:spec": {"f:worker": {"f:x": {}}}}}
    status = {"manager": "kserve", "subresource": "status", "fieldsV1": {"f:status": {}}}
    cases = [
        [users, own, status],
        [{**users, "fieldsV1": {}}, own, status],  # the others record nothing: all stay
        [own],
    ]
    for entries in cases:
        before = target([dict(e) for e in entries])
        answers = (foreign_versions(before), users_part(before, "worker"))
        cache = Cache()
        cache.set_target(("LLMInferenceService", "a", "m"), "serving.kserve.io/v1alpha2", before)
        cached = cache.targets[("LLMInferenceService", "a", "m")]["serving.kserve.io/v1alpha2"]
        assert (foreign_versions(cached), users_part(cached, "worker")) == answers
    assert [e["manager"] for e in cached["metadata"]["managedFields"]] == ["kvtier-operator"]
    first = target([dict(e) for e in cases[0]])
    Cache().set_target(("LLMInferenceService", "a", "m"), "serving.kserve.io/v1alpha2", first)
    assert [e["manager"] for e in first["metadata"]["managedFields"]] == ["kubectl"]
