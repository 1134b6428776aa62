"""The observer: a background task that reads each tier's vLLM metrics on its own schedule.

It never runs inside a reconcile: results are kept by tier key and the tier is queued, and
the next reconcile writes them (status.observed, TierEffective). Reads run in threads under
a deadline, so a slow or dead metrics source delays nothing but its own next reading.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from kvtier.api.observation import DiskObservation, Observation
from kvtier.api.observed import MetricsSpec, PrometheusCA
from kvtier.names.labels import TierRef
from kvtier.names.objects import EVICTOR_METRICS_PORT
from kvtier.observe import disk
from kvtier.observe.prometheus import PrometheusClient, PrometheusSource, QueryError
from kvtier.observe.queries import Selection
from kvtier.observe.scrape import History, PodEndpoint, scrape
from kvtier.observe.series import Snapshot
from kvtier.observe.status import (
    Source,
    TierFacts,
    evaluate,
    failed,
    tier_facts,
)
from kvtier.observe.verdict import Thresholds
from kvtier.tiers.registry import tier_by_status_name

log = logging.getLogger("kvtier.observe")

# Inside the operator's pod (the kubelet mounts and rotates them).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CA_FILES = {
    PrometheusCA.SERVICE_CA: f"{SERVICE_ACCOUNT_DIR}/service-ca.crt",
    PrometheusCA.CLUSTER_CA: f"{SERVICE_ACCOUNT_DIR}/ca.crt",
    PrometheusCA.SYSTEM: None,
}
DEFAULT_WINDOW = 300
DEFAULT_INTERVAL = 60
TICK_SECONDS = 1.0

TierKey = tuple[str, str]
ListPods = Callable[[str], list[dict[str, Any]]]


@dataclass(frozen=True)
class Settings:
    """spec.metrics with the built-in defaults filled in."""

    source: Source
    window: float
    interval: float
    thresholds: Thresholds
    prometheus: PrometheusSource | None
    namespace_label: str
    pod_label: str
    scrape_port: int
    scrape_path: str


def settings(metrics: Mapping[str, Any] | None) -> Settings | None:
    """None when the policy sets no metrics source (or an invalid one: the policy's own
    status reports that)."""
    if not metrics:
        return None
    try:
        spec = MetricsSpec.model_validate(metrics)
    except ValidationError:
        return None
    th = spec.thresholds
    defaults = Thresholds()
    thresholds = Thresholds(
        min_prompt_tokens=defaults.min_prompt_tokens
        if th is None or th.min_prompt_tokens is None
        else th.min_prompt_tokens,
        min_hit_ratio=defaults.min_hit_ratio
        if th is None or th.min_hit_ratio is None
        else th.min_hit_ratio,
        max_stores_dropped=defaults.max_stores_dropped
        if th is None or th.max_stores_dropped is None
        else th.max_stores_dropped,
        confirmations=defaults.confirmations
        if th is None or th.confirmations is None
        else th.confirmations,
    )
    window = float(spec.window_seconds or DEFAULT_WINDOW)
    prom = spec.prometheus
    source = None
    if prom is not None:
        https = prom.url.startswith("https://")
        source = PrometheusSource(
            url=prom.url,
            token_file=None
            if prom.service_account_token is False
            else f"{SERVICE_ACCOUNT_DIR}/token",
            ca_file=CA_FILES[prom.ca or PrometheusCA.SERVICE_CA] if https else None,
        )
    scrape_spec = spec.direct_scrape
    return Settings(
        source="Prometheus" if prom is not None else "DirectScrape",
        window=window,
        interval=float(spec.interval_seconds or min(DEFAULT_INTERVAL, window / 2)),
        thresholds=thresholds,
        prometheus=source,
        namespace_label=(prom.namespace_label if prom else None) or "namespace",
        pod_label=(prom.pod_label if prom else None) or "pod",
        scrape_port=(scrape_spec.port if scrape_spec else None) or 8000,
        scrape_path=(scrape_spec.path if scrape_spec else None) or "/metrics",
    )


def key_of(facts: TierFacts) -> TierKey:
    return facts.namespace, facts.name


def pod_endpoints(
    pods: list[dict[str, Any]], prefix: str, port: int, path: str
) -> list[PodEndpoint]:
    """Running pods of the target (named after it) that have an IP."""
    out = []
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "")
        status = pod.get("status") or {}
        if name.startswith(prefix) and status.get("phase") == "Running" and status.get("podIP"):
            out.append(PodEndpoint(name, f"http://{status['podIP']}:{port}{path}"))
    return sorted(out, key=lambda e: e.pod)


class Observer:
    def __init__(
        self,
        list_pods: ListPods,
        wake: Callable[[TierKey], None],
        clock: Callable[[], float] = time.time,
        evictor_port: int = EVICTOR_METRICS_PORT,
    ) -> None:
        self._list_pods = list_pods
        self._evictor_port = evictor_port  # of kvtier evict's /metrics, for direct scrapes
        self._wake = wake
        self._clock = clock
        self.results: dict[TierKey, Observation] = {}
        self._due: dict[TierKey, float] = {}
        self._histories: dict[TierKey, History] = {}
        self._disk_histories: dict[TierKey, History] = {}
        self._client: PrometheusClient | None = None
        self.settings: Settings | None = None

    def configure(self, metrics: Mapping[str, Any] | None) -> None:
        new = settings(metrics)
        if new == self.settings:
            return
        if self._client is not None:
            self._client.close()
        self.settings = new
        self._client = PrometheusClient(new.prometheus) if new and new.prometheus else None
        self._due.clear()
        self._histories.clear()
        self._disk_histories.clear()
        if new is None:
            self.results.clear()

    def forget(self, key: TierKey) -> None:
        for store in (self.results, self._due, self._histories, self._disk_histories):
            store.pop(key, None)

    def _read(
        self, st: Settings, facts: TierFacts, now: float
    ) -> tuple[Snapshot | None, Snapshot] | QueryError:
        prefix = f"{facts.target}-"
        if st.source == "Prometheus":
            assert self._client is not None
            sel = Selection(facts.namespace, prefix, st.namespace_label, st.pod_label)
            after = self._client.counters(sel, now)
            if isinstance(after, QueryError):
                return after
            before = self._client.counters(sel, now - st.window)
            if isinstance(before, QueryError):
                return before
            return before, after
        endpoints = pod_endpoints(
            self._list_pods(facts.namespace), prefix, st.scrape_port, st.scrape_path
        )
        if not endpoints:
            return QueryError("NoPods", f"no running pod of {facts.target} to scrape")
        snap = scrape(endpoints, at=now)
        if isinstance(snap, QueryError):
            return snap
        history = self._histories.setdefault((facts.namespace, facts.name), History())
        history.add(snap)
        return history.baseline(now, st.window), snap

    def evaluate(self, key: TierKey, tier: Mapping[str, Any]) -> Observation | None:
        """One blocking evaluation (run it in a thread)."""
        st = self.settings
        facts = tier_facts(tier)
        if st is None or facts is None:
            return None
        last = self.results.get(key)
        if last is not None:
            # This replica's own last result is newer than the status the cache holds.
            held = (last.observed or {}).get("measuredTPrefillSeconds", facts.previous_t_prefill)
            facts = replace(facts, previous=last.state, previous_t_prefill=held)
        now = self._clock()
        try:
            read = self._read(st, facts, now)
        except Exception as exc:  # any failure is a condition, never a crashed observer
            log.warning("observing %s/%s failed: %s", *key, exc)
            read = QueryError("ReadFailed", f"{type(exc).__name__}: {exc}"[:300])
        if isinstance(read, QueryError):
            obs = failed(f"{st.source}: {read.reason}: {read.message}")
        else:
            before, after = read
            at = datetime.fromtimestamp(now, UTC)
            obs = evaluate(facts, before, after, st.thresholds, st.source, at)
        return replace(obs, disk=self._observe_disk(st, facts, now, last))

    def _read_disk(
        self, st: Settings, facts: TierFacts, now: float
    ) -> tuple[Snapshot | None, Snapshot] | QueryError:
        """The disk tier's evictor gauges now and a window back: the pods its type names
        (kvtier.tiers): the model-server pods' sidecars for NVMe, the claim's evictor
        Deployment for CephFS."""
        tier_type = tier_by_status_name(facts.disk_tier)
        tier = TierRef(facts.namespace, facts.name)
        found = tier_type.evictor_pods(tier, facts.target, facts.disk_claim) if tier_type else None
        if found is None:
            what = tier_type.name if tier_type else facts.disk_tier
            return QueryError("NoClaim", f"the {what} tier has no claim, so no evictor yet")
        prefix = found
        if st.source == "Prometheus":
            assert self._client is not None
            sel = Selection(facts.namespace, prefix, st.namespace_label, st.pod_label)
            after = self._client.counters(sel, now, disk.READ)
            if isinstance(after, QueryError):
                return after
            before = self._client.counters(sel, now - st.window, disk.READ)
            if isinstance(before, QueryError):
                return before
            return before, after
        endpoints = pod_endpoints(
            self._list_pods(facts.namespace), prefix, self._evictor_port, "/metrics"
        )
        if not endpoints:
            return QueryError("NoPods", f"no running evictor pod ({prefix}*) to scrape")
        snap = scrape(endpoints, at=now, names=disk.READ)
        if isinstance(snap, QueryError):
            return snap
        history = self._disk_histories.setdefault((facts.namespace, facts.name), History())
        history.add(snap)
        return history.baseline(now, st.window), snap

    def _observe_disk(
        self, st: Settings, facts: TierFacts, now: float, last: Observation | None
    ) -> DiskObservation | None:
        """DiskPressure of the tier's NVMe or CephFS tier; None without one."""
        if facts.disk_tier is None:
            return None
        previous = facts.disk_previous
        if last is not None and last.disk is not None and last.disk.tier == facts.disk_tier:
            previous = last.disk.state  # with its pending confirmation count
        try:
            read = self._read_disk(st, facts, now)
        except Exception as exc:  # as for vLLM's metrics: a condition, never a crash
            log.warning("observing the disk tier of %s/%s failed: %s", *key_of(facts), exc)
            read = QueryError("ReadFailed", f"{type(exc).__name__}: {exc}"[:300])
        if isinstance(read, QueryError):
            return disk.failed(facts.disk_tier, f"{st.source}: {read.reason}: {read.message}")
        before, after = read
        return disk.evaluate(facts.disk_tier, before, after, st.window, st.thresholds, previous)

    async def run(
        self,
        tiers: Callable[[], Mapping[TierKey, Mapping[str, Any]]],
        policy: Callable[[], Mapping[str, Any] | None],
        leading: asyncio.Event,
    ) -> None:
        """Evaluate each tier every interval while this replica leads, following the
        KVCachePolicy's spec.metrics as it changes."""
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self._tick(tiers, policy, leading)
            except Exception:  # the observer outlives any one bad tick
                log.exception("observing tiers failed; retrying")

    async def _tick(
        self,
        tiers: Callable[[], Mapping[TierKey, Mapping[str, Any]]],
        policy: Callable[[], Mapping[str, Any] | None],
        leading: asyncio.Event,
    ) -> None:
        self.configure(((policy() or {}).get("spec") or {}).get("metrics"))
        st = self.settings
        if st is None or not leading.is_set():
            return
        now = time.monotonic()
        for key, tier in list(tiers().items()):
            if self._due.get(key, 0.0) > now:
                continue
            self._due[key] = now + st.interval
            try:
                result = await asyncio.wait_for(
                    asyncio.to_thread(self.evaluate, key, tier), timeout=st.interval
                )
            except TimeoutError:
                result = failed(f"{st.source}: no answer within {st.interval:g} s")
            if result is not None:
                self.results[key] = result
                self._wake(key)
