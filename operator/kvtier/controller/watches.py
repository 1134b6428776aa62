"""What the operator watches, and which tiers each change wakes.

Every handler runs on the event loop with one decoded event: it updates the cache and
enqueues the tiers the change concerns. Nothing here reads the API or decides.

An event about a tier that is being reconciled waits until that reconcile is done: it may be
the echo of the reconcile's own write, and the watch can deliver it before the worker has taken
the write's response into the cache. Judged then, an echo is no news and wakes nothing; judged
at once, it would wake the tier for one more decision that finds nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kvtier.controller.cache import Cache, TierKey, is_news, owned_facts
from kvtier.controller.controller import Controller
from kvtier.controller.policy_reconciler import POLICY_KEY
from kvtier.kube.informer import Deliver, Watched
from kvtier.names import API_VERSION
from kvtier.names.labels import PROBE_TIER
from kvtier.names.records import configmap_record
from kvtier.policy.replica1 import filesystem_key, is_replica1
from kvtier.targets.registry import KINDS, api_versions

Handler = Callable[[Controller, str, dict[str, Any]], None]
MANAGED = "app.kubernetes.io/managed-by=kvtier"
TARGET_REF = ("targetRef",)  # what on_tier reads of a deleted tier


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _held(
    controller: Controller, tiers: list[TierKey], handler: Handler, event: str, obj: dict[str, Any]
) -> bool:
    """Whether the event waits for a reconcile of one of `tiers` to finish (see above)."""
    later = partial(handler, controller, event, obj)
    return any(controller.queue.hold(key, later) for key in tiers)


def on_tier(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    key = _ns_name(obj)
    if _held(controller, [key], on_tier, event, obj):
        return
    if event == "DELETED":
        controller.cache.pop_tier(key)
    elif is_news(obj, controller.cache.tiers.get(key)):
        controller.cache.set_tier(key, obj)
    else:
        return
    controller.queue.add(key)
    # Tiers naming the same target decide together which one applies.
    ref = (obj.get("spec") or {}).get("targetRef") or {}
    controller.enqueue(
        controller.cache.tiers_for_target(ref.get("kind", ""), key[0], ref.get("name", ""))
    )


def on_policy(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    if _ns_name(obj)[1] != "cluster":
        return  # admission refuses other names; nothing else is a policy
    before = controller.cache.policy
    controller.cache.policy = None if event == "DELETED" else obj
    if event != "DELETED" and before is not None and before.get("spec") == obj.get("spec"):
        return  # only its status (kvtier's replica-1 condition) or metadata changed
    controller.queue.add(POLICY_KEY)
    controller.enqueue(controller.cache.tier_keys())


def on_target(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    key = (str(obj.get("kind", "")), *_ns_name(obj))
    tiers = controller.cache.tiers_for_target(*key)  # the cache changes below leave it as is
    if _held(controller, tiers, on_target, event, obj):
        return
    version = str(obj.get("apiVersion", ""))
    if event == "DELETED":
        controller.cache.forget_target(key)
    elif is_news(obj, controller.cache.targets.get(key, {}).get(version)):
        controller.cache.set_target(key, version, obj)
    elif not controller.cache.written_over(key, obj):
        return  # the echo of kvtier's own apply, or a change its decision saw
    controller.enqueue(tiers)


def on_configmap(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    """A model's config.json, or a scheduler config (the one a target's config.ref names, or
    one carrying a tier's record): only the ones a tier reads are kept."""
    key = _ns_name(obj)
    cache = controller.cache
    tiers = {*cache.tiers_for_configmap(*key), *cache.tiers_for_scheduler_configmap(*key)}
    if _held(controller, sorted(tiers), on_configmap, event, obj):
        return
    if event != "DELETED" and not is_news(obj, cache.configmaps.get(key)):
        return  # the echo of kvtier's own patch: the cache holds its response already
    cache.set_configmap(obj, deleted=True)
    if event != "DELETED" and (tiers or configmap_record(obj) is not None):
        cache.set_configmap(obj, deleted=False)
    # A record removed still wakes the tier it was of (taken above), a new one its tier.
    controller.enqueue(sorted({*tiers, *cache.tiers_for_scheduler_configmap(*key)}))


def on_llmisvc_config(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    """A scheduler preset or baseRef'd config: it may set a target's endpoint picker
    version. kvtier never writes one, so every event is news."""
    controller.cache.set_llmisvc_config(obj, deleted=event == "DELETED")
    controller.enqueue(controller.cache.tiers_for_llmisvc_config(*_ns_name(obj)))


def on_related(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    """An object of a kind a target kind reads (a ServingRuntime): it may change the pod
    another controller builds for the targets. kvtier never writes one: every event is news."""
    controller.cache.set_related(obj, deleted=event == "DELETED")
    namespace = _ns_name(obj)[0]
    controller.enqueue(controller.cache.tiers_for_related(str(obj.get("kind", "")), namespace))


def related_watches() -> list[Watched]:
    """One watch per kind the target kinds read (Kind.reads), each once."""
    seen = {(r.api_version, r.kind) for k in KINDS for r in k.reads}
    return [Watched(api_version, kind, managed_fields=False) for api_version, kind in sorted(seen)]


def on_node(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    name = _ns_name(obj)[1]
    if event == "DELETED":
        changed = controller.cache.nodes.pop(name, None) is not None
    else:
        changed = controller.cache.set_node(obj)
    if changed:
        controller.enqueue(controller.cache.tier_keys())


def _pool_classes(policy: dict[str, Any] | None) -> set[str]:
    """The StorageClasses the policy's NVMe pools name."""
    pools = ((policy or {}).get("spec") or {}).get("nvmePools") or []
    return {str(p["storageClassName"]) for p in pools if p.get("storageClassName")}


def on_storage_class(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    name = _ns_name(obj)[1]
    if event == "DELETED":
        controller.cache.storage_classes.pop(name, None)
    else:
        controller.cache.storage_classes[name] = obj
    if name in _pool_classes(controller.cache.policy):
        controller.enqueue(controller.cache.tier_keys())


def on_capacity(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    """CSIStorageCapacity: a change for a pool's class wakes the tiers (only those of a
    StorageClass pool that is not applied yet read it, the rest decide nothing new)."""
    key = _ns_name(obj)
    if event == "DELETED":
        controller.cache.capacities.pop(key, None)
    else:
        controller.cache.capacities[key] = obj
    if str(obj.get("storageClassName")) in _pool_classes(controller.cache.policy):
        controller.enqueue(controller.cache.tier_keys())


def on_owned(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    """PVs, PVCs, probe Jobs and their pods, evictor Deployments: kvtier's own objects, by
    tier id label."""
    owner = controller.cache.owner(obj)
    if owner is not None and _held(controller, [owner], on_owned, event, obj):
        return
    deleted = event == "DELETED"
    cached = controller.cache.owned_copy(obj)
    if not deleted and not is_news(obj, cached):
        return
    same = cached is not None and owned_facts(obj) is not None
    same = same and not deleted and owned_facts(obj) == owned_facts(cached or {})
    key = controller.cache.set_owned(obj, deleted=deleted)
    if key is not None and not same:  # a change no decision reads is kept, and wakes nothing
        controller.queue.add(key)


def on_filesystem(controller: Controller, event: str, obj: dict[str, Any]) -> None:
    """kvtier's replica-1 CephFilesystem, or one of the name the policy wants: its class
    waits for Rook's status.phase Ready, and its removal for Rook to let it go."""
    if is_replica1(obj) or _ns_name(obj) == filesystem_key(controller.cache.policy):
        controller.queue.add(POLICY_KEY)


def target_versions(cache: Cache) -> dict[str, str]:
    """The one version each registered target kind is watched in: the preferred version the
    cluster serves (discovery), else its first. Each served version is a view of the same
    object, so one watch sees every change; a tier naming another version reads it. A kind
    served in several is noted in `cache.watched`, so the cache knows which view is fed."""
    versions: dict[str, str] = {}
    for kind in KINDS:
        served = cache.preferred_version(kind.kind)
        if served is not None and len(kind.versions) > 1:
            cache.watched[kind.kind] = served
        versions[kind.kind] = served or api_versions(kind)[0]
    return versions


def watches(targets: dict[str, str]) -> list[tuple[Watched, Handler]]:
    """Every watch, cluster-wide; `targets`: the version each target kind is watched in
    (target_versions)."""
    # Only the targets' managedFields are read (which parts are the user's): the other kinds'
    # are not kept (on a KVCacheTier, about half of the decoded object).
    return [
        (
            Watched(API_VERSION, "KVCacheTier", managed_fields=False, spec_when_gone=TARGET_REF),
            on_tier,
        ),
        (Watched(API_VERSION, "KVCachePolicy", managed_fields=False), on_policy),
        *((Watched(targets[k.kind], k.kind), on_target) for k in KINDS),
        *((w, on_related) for w in related_watches()),
        (Watched("v1", "ConfigMap", managed_fields=False), on_configmap),
        (
            Watched(
                "serving.kserve.io/v1alpha2", "LLMInferenceServiceConfig", managed_fields=False
            ),
            on_llmisvc_config,
        ),
        (Watched("v1", "Node", managed_fields=False), on_node),
        (Watched("storage.k8s.io/v1", "StorageClass", managed_fields=False), on_storage_class),
        (Watched("storage.k8s.io/v1", "CSIStorageCapacity", managed_fields=False), on_capacity),
        (Watched("v1", "PersistentVolume", MANAGED, managed_fields=False), on_owned),
        (Watched("v1", "PersistentVolumeClaim", MANAGED, managed_fields=False), on_owned),
        (Watched("batch/v1", "Job", MANAGED, managed_fields=False), on_owned),
        # CephFS tiers' evictors
        (Watched("apps/v1", "Deployment", MANAGED, managed_fields=False), on_owned),
        (Watched("v1", "Pod", PROBE_TIER, managed_fields=False), on_owned),
        # Only the policy's replica-1 pool reads these, and each change wakes it anyway.
        (
            Watched("ceph.rook.io/v1", "CephFilesystem", decides=False, managed_fields=False),
            on_filesystem,
        ),
    ]


def deliveries(controller: Controller) -> list[tuple[Watched, Deliver]]:
    """The watches and their handlers, the target kinds in the versions discovery chose."""
    targets = target_versions(controller.cache)
    return [(w, partial(handler, controller)) for w, handler in watches(targets)]
