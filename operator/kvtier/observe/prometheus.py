"""The Prometheus HTTP API client: instant queries with a bounded timeout and rate.

Errors are values (QueryError), never exceptions: a caller turns them into a condition.
On OpenShift the Thanos Querier takes the operator's ServiceAccount token as a bearer token,
with the service CA; both files are re-read on every query, as the kubelet rotates them.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

from kvtier.observe.queries import BadAnswer, Selection, counters_query, snapshot_from_vector
from kvtier.observe.series import READ, Snapshot


@dataclass(frozen=True)
class PrometheusSource:
    url: str  # e.g. https://thanos-querier.openshift-monitoring.svc:9091
    token_file: str | None = None
    ca_file: str | None = None
    timeout_seconds: float = 5.0
    min_interval_seconds: float = 0.5  # at most two queries a second per client


@dataclass(frozen=True)
class QueryError:
    reason: str  # CamelCase: Unreachable, Timeout, Unauthorized, HTTPError, BadAnswer
    message: str


class PrometheusClient:
    def __init__(
        self,
        source: PrometheusSource,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.source = source
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next = 0.0
        context = ssl.create_default_context(cafile=source.ca_file) if source.ca_file else None
        self._http = urllib3.PoolManager(
            ssl_context=context,
            timeout=urllib3.Timeout(total=source.timeout_seconds),
            retries=False,
        )

    def _wait_turn(self) -> None:
        with self._lock:
            now = self._clock()
            wait = self._next - now
            self._next = max(now, self._next) + self.source.min_interval_seconds
        if wait > 0:
            self._sleep(wait)

    def _headers(self) -> dict[str, str] | QueryError:
        headers = {"Accept": "application/json"}
        if self.source.token_file:
            try:
                with open(self.source.token_file, encoding="utf-8") as f:
                    headers["Authorization"] = f"Bearer {f.read().strip()}"
            except OSError as exc:
                return QueryError("Unauthorized", f"cannot read the token file: {exc.strerror}")
        return headers

    def query(
        self, promql: str, at: float | None = None, namespace: str | None = None
    ) -> dict[str, Any] | QueryError:
        """The `data` of an instant query at `at` (seconds since the epoch; now if None).
        `namespace` is for the Thanos Querier's tenancy port (9092), which serves one
        namespace to anyone who may get its pods; Prometheus ignores the parameter."""
        headers = self._headers()
        if isinstance(headers, QueryError):
            return headers
        params = {"query": promql, "timeout": f"{self.source.timeout_seconds:g}s"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        if namespace is not None:
            params["namespace"] = namespace
        url = f"{self.source.url.rstrip('/')}/api/v1/query?{urlencode(params)}"
        self._wait_turn()
        try:
            resp = self._http.request("GET", url, headers=headers)
        except urllib3.exceptions.NewConnectionError as exc:  # a TimeoutError subclass
            return QueryError("Unreachable", f"{self.source.url}: {exc}"[:300])
        except urllib3.exceptions.TimeoutError:
            return QueryError(
                "Timeout", f"{self.source.url}: no answer in {self.source.timeout_seconds:g} s"
            )
        except urllib3.exceptions.HTTPError as exc:
            return QueryError(
                "Unreachable", f"{self.source.url}: {type(exc).__name__}: {exc}"[:300]
            )
        if resp.status in (401, 403):
            return QueryError(
                "Unauthorized",
                f"{self.source.url} answered {resp.status}: check the token and RBAC",
            )
        try:
            body = json.loads(resp.data)
        except ValueError:
            return QueryError("BadAnswer", f"{self.source.url} answered {resp.status}, not JSON")
        if resp.status != 200 or body.get("status") != "success":
            detail = body.get("error") if isinstance(body, dict) else None
            return QueryError("HTTPError", f"{self.source.url} answered {resp.status}: {detail}")
        data = body.get("data")
        if not isinstance(data, dict):
            return QueryError("BadAnswer", f"{self.source.url}: no data in the answer")
        return data

    def counters(
        self, sel: Selection, at: float, names: Sequence[str] = READ
    ) -> Snapshot | QueryError:
        """Every series of `names` (vLLM's counters kvtier reads) of the selected pods, as
        they stood at `at`."""
        data = self.query(counters_query(sel, names), at, sel.namespace)
        if isinstance(data, QueryError):
            return data
        try:
            return snapshot_from_vector(data, sel.pod_label, at)
        except (BadAnswer, ValueError) as exc:
            return QueryError("BadAnswer", str(exc))

    def close(self) -> None:
        self._http.clear()
