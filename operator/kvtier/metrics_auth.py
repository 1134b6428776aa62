"""Who may read /metrics: the scraper's bearer token, checked by the API server.

The convention of kube-rbac-proxy and controller-runtime's metrics filters: a TokenReview
says who the token belongs to (else 401), a SubjectAccessReview whether that user may `get`
the non-resource URL /metrics (else 403). Verdicts are cached briefly, so a scrape every
few seconds costs the API server two reviews per token and TTL, not two per scrape.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

METRICS_PATH = "/metrics"
CACHE_SECONDS = 60.0
CACHE_LIMIT = 1024  # distinct tokens remembered; more are reviewed every time


@dataclass(frozen=True)
class Verdict:
    """An HTTP status for the request and a short text saying why."""

    status: int
    reason: str


UNAUTHENTICATED = Verdict(401, "Unauthorized: a bearer token is required")
REJECTED = Verdict(401, "Unauthorized: the API server did not authenticate the token")
REVIEW_FAILED = Verdict(503, "the API server could not review the token; retry later")


class Reviewer(Protocol):
    """Creates the two reviews on the API server and returns their status as dicts."""

    def token_review(self, body: Mapping[str, Any]) -> Mapping[str, Any]: ...

    def access_review(self, body: Mapping[str, Any]) -> Mapping[str, Any]: ...


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def token_review_body(token: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def access_review_body(user: Mapping[str, Any], path: str = METRICS_PATH) -> dict[str, Any]:
    """May the user TokenReview found `get` the non-resource URL `path`?"""
    spec: dict[str, Any] = {
        "user": user.get("username", ""),
        "groups": list(user.get("groups") or []),
        "nonResourceAttributes": {"path": path, "verb": "get"},
    }
    if user.get("uid"):
        spec["uid"] = user["uid"]
    if user.get("extra"):
        spec["extra"] = {k: list(v) for k, v in user["extra"].items()}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


def verdict_of(token_status: Mapping[str, Any], access_status: Mapping[str, Any]) -> Verdict:
    """The answer to a scrape from the two reviews' status."""
    if not token_status.get("authenticated"):
        return REJECTED
    user = (token_status.get("user") or {}).get("username", "")
    if access_status.get("allowed") and not access_status.get("denied"):
        return Verdict(200, f"{user} may get {METRICS_PATH}")
    return Verdict(403, f"Forbidden: {user} may not get {METRICS_PATH}")


class Authorizer:
    """Reviews a request's bearer token, remembering each verdict for `ttl` seconds."""

    def __init__(
        self,
        reviewer: Reviewer,
        ttl: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviewer = reviewer
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Verdict]] = {}

    def check(self, authorization: str | None) -> Verdict:
        token = bearer_token(authorization)
        if token is None:
            return UNAUTHENTICATED
        key = hashlib.sha256(token.encode()).hexdigest()  # no token kept in memory
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
        if cached and cached[0] > now:
            return cached[1]
        try:
            verdict = self._review(token)
        except Exception:  # an API outage is a failed scrape, never a crashed server
            return REVIEW_FAILED
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) < CACHE_LIMIT:
                self._cache[key] = (now + self._ttl, verdict)
        return verdict

    def _review(self, token: str) -> Verdict:
        token_status = self._reviewer.token_review(token_review_body(token))
        if not token_status.get("authenticated"):
            return REJECTED
        access = self._reviewer.access_review(access_review_body(token_status.get("user") or {}))
        return verdict_of(token_status, access)


class KubeReviewer:
    """Reviewer over the operator's own API connection (kvtier.kube.rest.Kube)."""

    def __init__(self, kube: Any) -> None:
        self._kube = kube

    def token_review(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return self._create("/apis/authentication.k8s.io/v1/tokenreviews", body)

    def access_review(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return self._create("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)

    def _create(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        response = self._kube.request("POST", path, dict(body)) or {}
        status: Mapping[str, Any] = response.get("status") or {}
        return status
