"""kopf runs the operator process: credentials, startup and cleanup, the liveness endpoint.

Load with `kvtier operator`, or `kopf run -m kvtier.controller.registration --all-namespaces`.
The watches are kvtier's own informers (kvtier.controller.watches), not kopf resource handlers:
kopf's per-event machinery cost about 1 ms of CPU per event, the largest share of the
operator's CPU while hundreds of tiers converged; a decoded event costs a fifth of that.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

import kopf

from kvtier.controller.controller import Controller
from kvtier.controller.leader import LeaderElector
from kvtier.controller.resync import ENV_RESYNC_SECONDS, RESYNC_SECONDS
from kvtier.controller.watches import deliveries
from kvtier.kube.informer import BACKOFFS, Informer
from kvtier.kube.rest import Kube, load_client
from kvtier.render.picker_version import KSERVE_NAMESPACE

log = logging.getLogger("kvtier.registration")

ENV_KUBECONFIG = "KVTIER_KUBECONFIG"
ENV_WORKERS = "KVTIER_WORKERS"
ENV_NAMESPACE = "KVTIER_NAMESPACE"  # where the leader-election Lease lives
ENV_LEADER_ELECT = "KVTIER_LEADER_ELECT"
ENV_KSERVE_NAMESPACE = "KVTIER_KSERVE_NAMESPACE"  # KServe's own (its POD_NAMESPACE)
# The operator's own image, which probe Jobs run: the image of the container named
# `operator` in the operator's own pod (so an override of the container image alone, such as
# kustomize `images:`, reaches probe Jobs), else RELATED_IMAGE_KVTIER_OPERATOR (OLM's
# convention; the chart, deploy/manifests and the bundle set it from the same value), else
# KVTIER_IMAGE (older installs), else the built-in default.
ENV_POD_NAME = "KVTIER_POD_NAME"
ENV_RELATED_IMAGE = "RELATED_IMAGE_KVTIER_OPERATOR"
ENV_IMAGE = "KVTIER_IMAGE"
CONTAINER = "operator"


def _controller(memo: kopf.Memo) -> Controller:
    controller: Controller = memo["controller"]
    return controller


def probe_image(kube: Kube, env: Mapping[str, str]) -> str | None:
    """The image probe Jobs run (see ENV_POD_NAME); None leaves the built-in default."""
    pod_name, namespace = env.get(ENV_POD_NAME), env.get(ENV_NAMESPACE)
    if pod_name and namespace:
        try:
            pod = kube.get("v1", "Pod", pod_name, namespace) or {}
        except Exception as exc:
            log.warning("cannot read the operator's own pod %s/%s: %s", namespace, pod_name, exc)
            pod = {}
        for container in (pod.get("spec") or {}).get("containers") or []:
            if container.get("name") == CONTAINER and container.get("image"):
                return str(container["image"])
    return env.get(ENV_RELATED_IMAGE) or env.get(ENV_IMAGE) or None


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own credential loaders: the service account in a pod, else a kubeconfig."""
    if os.environ.get(ENV_KUBECONFIG):
        os.environ["KUBECONFIG"] = os.environ[ENV_KUBECONFIG]
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


async def _discover(controller: Controller) -> None:
    """Which target versions the cluster serves, before watching: the version each target
    kind is watched in depends on it. The API may be restarting: ask until it answers."""
    failures = 0
    while True:
        try:
            controller.cache.served = await asyncio.to_thread(controller.served_versions)
            return
        except Exception as exc:
            delay = BACKOFFS[min(failures, len(BACKOFFS) - 1)]
            failures += 1
            log.warning("API discovery failed (%s); again in %.0fs", exc, delay)
            await asyncio.sleep(delay)


def kserve_namespace(env: Mapping[str, str]) -> str:
    """KServe's own namespace, where it looks for LLMInferenceServiceConfigs after the
    object's (the chart value operator.kserveNamespace; KServe's default otherwise)."""
    return env.get(ENV_KSERVE_NAMESPACE) or KSERVE_NAMESPACE


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.enabled = False  # Events come from decisions, not from log lines
    settings.scanning.disabled = True  # kopf watches nothing: no CRD or namespace scans
    kubeconfig = os.environ.get(ENV_KUBECONFIG)
    kube = Kube(load_client(kubeconfig))
    controller = Controller(
        kube,
        workers=int(os.environ.get(ENV_WORKERS, "4")),
        probe_image=probe_image(kube, os.environ),
        resync_seconds=float(os.environ.get(ENV_RESYNC_SECONDS, RESYNC_SECONDS)),
    )
    controller.cache.kserve_namespace = kserve_namespace(os.environ)
    memo["controller"] = controller
    await _discover(controller)
    feeds = deliveries(controller)
    # Watches hold their connections for minutes: a pool of their own, one for each.
    streams = Kube(load_client(kubeconfig, pool_size=len(feeds)))
    loop = asyncio.get_running_loop()
    controller.start([Informer(streams, w, deliver, loop) for w, deliver in feeds])
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
    if "controller" in memo:
        await _controller(memo).stop()
