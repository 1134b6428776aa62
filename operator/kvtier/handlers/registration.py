"""kopf runs the operator process: credentials, startup and cleanup, the liveness endpoint.

Load with `kvtier operator`, or `kopf run -m kvtier.handlers.registration --all-namespaces`.
The watches are kvtier's own informers (kvtier.handlers.watches), not kopf resource handlers:
kopf's per-event machinery cost about 1 ms of CPU per event, the largest share of the
operator's CPU while hundreds of tiers converged; a decoded event costs a fifth of that.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf

from kvtier.handlers.controller import Controller
from kvtier.handlers.leader import LeaderElector
from kvtier.handlers.watches import deliveries
from kvtier.kube.informer import BACKOFFS, Informer
from kvtier.kube.rest import Kube, load_client

log = logging.getLogger("kvtier.registration")

ENV_KUBECONFIG = "KVTIER_KUBECONFIG"
ENV_WORKERS = "KVTIER_WORKERS"
ENV_NAMESPACE = "KVTIER_NAMESPACE"  # where the leader-election Lease lives
ENV_LEADER_ELECT = "KVTIER_LEADER_ELECT"
ENV_IMAGE = "KVTIER_IMAGE"  # the operator's own image, which probe Jobs run


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


async def _discover(controller: Controller) -> None:
    """Which target versions the cluster serves, before watching: the watched version of
    LLMInferenceService depends on it. The API may be restarting: ask until it answers."""
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


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.enabled = False  # Events come from decisions, not from log lines
    settings.scanning.disabled = True  # kopf watches nothing: no CRD or namespace scans
    kubeconfig = os.environ.get(ENV_KUBECONFIG)
    kube = Kube(load_client(kubeconfig))
    controller = Controller(
        kube,
        workers=int(os.environ.get(ENV_WORKERS, "4")),
        probe_image=os.environ.get(ENV_IMAGE),
    )
    memo["controller"] = controller
    await _discover(controller)
    version = controller.cache.preferred_version("LLMInferenceService")
    if version is not None:
        controller.cache.watched["LLMInferenceService"] = version
    feeds = deliveries(controller, version)
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
