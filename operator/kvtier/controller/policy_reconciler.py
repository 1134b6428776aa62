"""Reconcile the KVCachePolicy: the cluster-scoped objects only the policy can cause.

The NVMe pools' StorageClasses and the replica-1 pool (kvtier's CephFilesystem, then its class
once Rook reports it Ready), never anything of a namespaced tier; the replica-1 condition goes
to the policy's status. The writes take a tier's path (writer.Writer.perform: in order, each
counted, stopping at the first failure); a CephFilesystem answered 404 (no such namespace, or
no Rook CRD) is the CephClusterNotFound condition instead, and is looked at again later.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kvtier.controller.cache import Cache, TierKey
from kvtier.controller.workqueue import WorkQueue
from kvtier.controller.writer import Writer
from kvtier.kube.rest import Kube
from kvtier.policy.policy_ready import policy_ready
from kvtier.policy.provisioning import policy_writes
from kvtier.policy.replica1 import OWNED_KINDS as REPLICA1_KINDS
from kvtier.policy.replica1 import RECHECK_SECONDS as REPLICA1_RECHECK_SECONDS
from kvtier.policy.replica1 import SELECTOR as REPLICA1_SELECTOR
from kvtier.policy.replica1 import filesystem_refused, policy_status_patch, policy_step
from kvtier.render import DesiredWrite

log = logging.getLogger("kvtier.controller")

POLICY_KEY: TierKey = ("", "KVCachePolicy")  # tiers always have a namespace


class PolicyReconciler:
    """Reads what the policy's writes would change, decides (policy/replica1.py), writes."""

    def __init__(self, kube: Kube, cache: Cache, writer: Writer, queue: WorkQueue[TierKey]):
        self.kube = kube
        self.cache = cache
        self.writer = writer
        self.queue = queue

    async def reconcile(self) -> None:
        policy = self.cache.policy
        observed: dict[tuple[str, str | None, str], Any] = {}
        for w in policy_writes(policy):
            current = await asyncio.to_thread(
                self.kube.get, w.api_version, w.kind, w.name, w.namespace
            )
            if current is not None:
                observed[(w.kind, w.namespace, w.name)] = current
        step = policy_step(policy, observed, await self._owned())
        verdict = step.verdict

        def refused(w: DesiredWrite, exc: ApiException) -> bool:
            nonlocal verdict
            if exc.status != 404 or w.kind != "CephFilesystem":
                return False
            verdict = filesystem_refused(w)  # no such namespace, or no Rook CRD
            # Nothing watched announces them: look again later.
            self.queue.add_after(POLICY_KEY, REPLICA1_RECHECK_SECONDS)
            return True

        done: list[DesiredWrite] = []
        try:
            await self.writer.perform(step.writes, done, refused, remember_unkept=False)
        finally:
            for w in done:
                log.info("policy: %s", w.summary)
        if verdict is not None and not verdict.ok:
            log.info("policy: %s %s: %s", verdict.type, verdict.reason, verdict.message)
        if policy:
            ready = policy_ready(policy.get("spec"), verdict)
            patch = policy_status_patch(policy, verdict, datetime.now(UTC), ready)
            if patch is not None:
                await self.writer.write_status("KVCachePolicy", policy, patch)

    async def _owned(self) -> list[dict[str, Any]]:
        """Every object labelled as kvtier's replica-1 pool, of each kind it may have."""
        owned: list[dict[str, Any]] = []
        for api_version, kind in REPLICA1_KINDS:
            try:
                found = await asyncio.to_thread(
                    self.kube.list, api_version, kind, None, REPLICA1_SELECTOR
                )
            except ApiException as exc:
                if exc.status != 404:  # no Rook CRD on this cluster: nothing of kvtier's
                    raise
                continue
            # A LIST's items carry no kind of their own.
            owned += [{**o, "apiVersion": api_version, "kind": kind} for o in found]
        return owned
