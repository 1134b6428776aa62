"""kopf registration: watches feed the cache and wake the tiers a change concerns.

Load with `kvtier operator`, or `kopf run -m kvtier.handlers.registration --all-namespaces`.
kopf's change-detection handlers are not used, so kopf stores no progress or diff-base on
user objects, and its diff-base is not even computed (see WatchOnly).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, cast

import kopf

from kvtier.api.tier import GROUP, VERSION
from kvtier.handlers.cache import is_news
from kvtier.handlers.controller import POLICY_KEY, Controller
from kvtier.handlers.leader import LeaderElector
from kvtier.kube.rest import Kube, load_client
from kvtier.render.probe_job import PROBE_TIER

log = logging.getLogger("kvtier.registration")

ENV_KUBECONFIG = "KVTIER_KUBECONFIG"
ENV_WORKERS = "KVTIER_WORKERS"
ENV_NAMESPACE = "KVTIER_NAMESPACE"  # where the leader-election Lease lives
ENV_LEADER_ELECT = "KVTIER_LEADER_ELECT"
ENV_IMAGE = "KVTIER_IMAGE"  # the operator's own image, which probe Jobs run


class WatchOnly(kopf.DiffBaseStorage):
    """No diff base: kopf would deep-copy and diff every watched body for change-detection
    handlers (on.create/update/field), which kvtier, level-based on raw events, has none of.
    That copy was the largest share of the operator's CPU while it converged, CPU the API
    server on the same cores needed."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _controller(memo: kopf.Memo) -> Controller:
    controller: Controller = memo["controller"]
    return controller


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own credential loaders: the service account in a pod, else a kubeconfig."""
    if os.environ.get(ENV_KUBECONFIG):
        os.environ["KUBECONFIG"] = os.environ[ENV_KUBECONFIG]
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = "kvcache.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kvcache.io")
    settings.persistence.diffbase_storage = WatchOnly()
    settings.posting.enabled = False  # Events come from decisions, not from log lines
    settings.watching.server_timeout = 600
    settings.networking.error_backoffs = [1, 2, 5, 10, 20, 30]
    kube = Kube(load_client(os.environ.get(ENV_KUBECONFIG)))
    controller = Controller(
        kube,
        workers=int(os.environ.get(ENV_WORKERS, "4")),
        probe_image=os.environ.get(ENV_IMAGE),
    )
    memo["controller"] = controller
    # kopf starts watching after startup: choose the watched versions first.
    try:
        controller.cache.served = await asyncio.to_thread(controller.served_versions)
    except Exception as exc:  # the API may be restarting: every version is watched then
        log.warning("API discovery failed, watching every target version: %s", exc)
    controller.cache.watched = WATCHED
    WATCHED.clear()
    preferred = controller.cache.preferred_version("LLMInferenceService")
    if preferred is not None:
        WATCHED["LLMInferenceService"] = preferred
    controller.start()
    if os.environ.get(ENV_LEADER_ELECT, "1") == "1":
        elector = LeaderElector(
            kube,
            os.environ.get(ENV_NAMESPACE, "kvtier-system"),
            on_started=controller.lead,
            on_stopped=controller.follow,
        )
        memo["elector"] = elector
        memo["election"] = asyncio.create_task(elector.run())
    else:
        controller.lead()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "election" in memo:
        memo["election"].cancel()
        await asyncio.to_thread(memo["elector"].release)
    await _controller(memo).stop()


@kopf.on.event(GROUP, VERSION, "kvcachetiers")
async def tier_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    obj: dict[str, Any] = dict(event["object"])
    meta = obj.get("metadata") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    if event["type"] == "DELETED":
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


@kopf.on.event(GROUP, VERSION, "kvcachepolicies")
async def policy_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    obj: dict[str, Any] = dict(event["object"])
    if (obj.get("metadata") or {}).get("name") != "cluster":
        return  # admission refuses other names; nothing else is a policy
    controller = _controller(memo)
    controller.cache.policy = None if event["type"] == "DELETED" else obj
    controller.queue.add(POLICY_KEY)
    controller.enqueue(controller.cache.tier_keys())


async def _target_event(kind: str, event: kopf.RawEvent, memo: kopf.Memo) -> None:
    controller = _controller(memo)
    obj: dict[str, Any] = dict(event["object"])
    meta = obj.get("metadata") or {}
    key = (kind, meta.get("namespace", ""), meta.get("name", ""))
    version = str(obj.get("apiVersion", ""))
    if event["type"] == "DELETED":
        controller.cache.forget_target(key)
    elif is_news(obj, controller.cache.targets.get(key, {}).get(version)):
        controller.cache.set_target(key, version, obj)
    else:
        return
    controller.enqueue(controller.cache.tiers_for_target(*key))


@kopf.on.event("serving.kserve.io", "v1beta1", "inferenceservices")
async def inference_service_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _target_event("InferenceService", event, memo)


# kind → the one version watched, for kinds served in several; filled at startup (kopf
# watches only after it). Each version is a view of the same object, so one watch sees every
# change, at half the events of watching two; a tier naming another version reads it.
WATCHED: dict[str, str] = {}


def _watched_llmisvc(resource: kopf.Resource) -> bool:
    # By version, not by group: the group's preferred version is InferenceService's v1beta1,
    # which LLMInferenceService does not serve.
    if (resource.group, resource.plural) != ("serving.kserve.io", "llminferenceservices"):
        return False
    chosen = WATCHED.get("LLMInferenceService")
    return chosen is None or chosen == f"{resource.group}/{resource.version}"


@kopf.on.event(_watched_llmisvc)
async def llm_inference_service_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _target_event("LLMInferenceService", event, memo)


@kopf.on.event("", "v1", "configmaps")
async def configmap_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    obj: dict[str, Any] = dict(event["object"])
    meta = obj.get("metadata") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    tiers = controller.cache.tiers_for_configmap(*key)
    if event["type"] == "DELETED":
        controller.cache.configmaps.pop(key, None)
    elif tiers:
        controller.cache.configmaps[key] = obj  # only the ones a tier reads are kept
    controller.enqueue(tiers)


@kopf.on.event("", "v1", "nodes")
async def node_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    obj: dict[str, Any] = dict(event["object"])
    name = (obj.get("metadata") or {}).get("name", "")
    if event["type"] == "DELETED":
        changed = controller.cache.nodes.pop(name, None) is not None
    else:
        changed = controller.cache.set_node(obj)
    if changed:
        controller.enqueue(controller.cache.tier_keys())


MANAGED = {"app.kubernetes.io/managed-by": "kvtier"}


def _owned(controller: Controller, obj: dict[str, Any], event: kopf.RawEvent) -> None:
    deleted = event["type"] == "DELETED"
    if not deleted and not is_news(obj, controller.cache.owned_copy(obj)):
        return
    key = controller.cache.set_owned(obj, deleted=deleted)
    if key is not None:
        controller.queue.add(key)


async def _owned_event(kind: str, event: kopf.RawEvent, memo: kopf.Memo) -> None:
    controller = _controller(memo)
    obj: dict[str, Any] = {**dict(event["object"]), "apiVersion": "v1", "kind": kind}
    _owned(controller, obj, event)


@kopf.on.event("", "v1", "persistentvolumes", labels=MANAGED)
async def volume_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _owned_event("PersistentVolume", event, memo)


@kopf.on.event("", "v1", "persistentvolumeclaims", labels=MANAGED)
async def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _owned_event("PersistentVolumeClaim", event, memo)


async def _ceph_owner_event(event: kopf.RawEvent, memo: kopf.Memo) -> None:
    # The replica-1 pool waits for its StorageCluster / CephFilesystem to exist.
    if event["type"] in ("ADDED", None):
        _controller(memo).queue.add(POLICY_KEY)


@kopf.on.event("ocs.openshift.io", "v1", "storageclusters")
async def storage_cluster_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _ceph_owner_event(event, memo)


@kopf.on.event("ceph.rook.io", "v1", "cephfilesystems")
async def ceph_filesystem_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _ceph_owner_event(event, memo)


@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
async def job_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    controller = _controller(memo)
    obj: dict[str, Any] = {**dict(event["object"]), "apiVersion": "batch/v1", "kind": "Job"}
    _owned(controller, obj, event)


@kopf.on.event("", "v1", "pods", labels={PROBE_TIER: kopf.PRESENT})
async def probe_pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _owned_event("Pod", event, memo)


logging.getLogger("kopf.objects").setLevel(logging.WARNING)
