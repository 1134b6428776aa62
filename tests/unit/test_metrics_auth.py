"""The pure parts of /metrics authorization and the HTTPS server (its API-server side runs
for real in tests/e2e/test_metrics_auth.py)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kvtier import metrics
from kvtier.cli import main
from kvtier.metrics_auth import (
    REVIEW_FAILED,
    Authorizer,
    access_review_body,
    bearer_token,
    verdict_of,
)
from tests.certs import ServingCert, serving_cert


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_access_review_asks_for_get_on_metrics_as_the_reviewed_user() -> None:
    user = {"username": "system:serviceaccount:m:p", "uid": "u1", "groups": ["g"],
            "extra": {"k": ("v",)}}  # fmt: skip
    spec = access_review_body(user)["spec"]
    assert spec == {
        "user": "system:serviceaccount:m:p",
        "uid": "u1",
        "groups": ["g"],
        "extra": {"k": ["v"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


@pytest.mark.parametrize(
    ("token", "access", "status"),
    [
        ({"authenticated": True, "user": {"username": "p"}}, {"allowed": True}, 200),
        ({"authenticated": True, "user": {"username": "p"}}, {"allowed": False}, 403),
        ({"authenticated": True}, {"allowed": True, "denied": True}, 403),
        ({"authenticated": False}, {"allowed": True}, 401),
        ({}, {}, 401),
    ],
)
def test_verdict(token: dict[str, Any], access: dict[str, Any], status: int) -> None:
    assert verdict_of(token, access).status == status


class Recorder:
    """Answers reviews from a table and counts them."""

    def __init__(self, users: Mapping[str, bool], fail: bool = False) -> None:
        self.users = users  # token -> may get /metrics
        self.fail = fail
        self.calls = 0

    def token_review(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls += 1
        if self.fail:
            raise ConnectionError("API server down")
        token = body["spec"]["token"]
        if token not in self.users:
            return {"authenticated": False}
        return {"authenticated": True, "user": {"username": token}}

    def access_review(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"allowed": self.users[body["spec"]["user"]]}


def test_verdicts_are_cached_per_token_until_they_expire() -> None:
    now = [0.0]
    reviewer = Recorder({"reader": True, "other": False})
    auth = Authorizer(reviewer, ttl=60, clock=lambda: now[0])
    assert auth.check("Bearer reader").status == 200
    assert auth.check("Bearer reader").status == 200
    assert auth.check("Bearer other").status == 403
    assert reviewer.calls == 2
    now[0] = 61
    assert auth.check("Bearer reader").status == 200
    assert reviewer.calls == 3
    assert auth.check(None).status == 401 and reviewer.calls == 3


def test_an_api_outage_is_a_503_and_not_remembered() -> None:
    reviewer = Recorder({"reader": True}, fail=True)
    auth = Authorizer(reviewer)
    assert auth.check("Bearer reader") == REVIEW_FAILED
    reviewer.fail = False
    assert auth.check("Bearer reader").status == 200


@pytest.fixture
def cert(tmp_path: Path) -> ServingCert:
    return serving_cert(tmp_path / "tls")


@pytest.fixture
def server(cert: ServingCert) -> Iterator[metrics.MetricsServer]:
    tls = metrics.TLSFiles(cert.cert, cert.key)
    srv = metrics.serve(0, "127.0.0.1", tls, Authorizer(Recorder({"reader": True})))
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def get(srv: metrics.MetricsServer, ca: Path, path: str = "/metrics", token: str = "") -> int:
    url = f"https://127.0.0.1:{srv.server_address[1]}{path}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=context):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def test_https_server_answers_by_verdict(server: metrics.MetricsServer, cert: ServingCert) -> None:
    assert get(server, cert.ca, token="reader") == 200
    assert get(server, cert.ca, token="nobody") == 401
    assert get(server, cert.ca) == 401
    assert get(server, cert.ca, "/other", token="reader") == 404


def test_renewed_certificate_is_served_without_a_restart(
    server: metrics.MetricsServer, cert: ServingCert, tmp_path: Path
) -> None:
    renewed = serving_cert(tmp_path / "renewed")
    cert.cert.write_bytes(renewed.cert.read_bytes())
    cert.key.write_bytes(renewed.key.read_bytes())
    assert get(server, renewed.ca, token="reader") == 200
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(server, cert.ca, token="reader")


def test_operator_refuses_to_start_without_tls_or_an_explicit_insecure_flag(
    capsys: pytest.CaptureFixture[str], cert: ServingCert, tmp_path: Path
) -> None:
    assert main(["operator"]) == 2
    assert "--metrics-insecure" in capsys.readouterr().err
    assert main(["operator", f"--metrics-cert-file={cert.cert}"]) == 2
    missing = tmp_path / "absent.crt"
    assert (
        main(["operator", f"--metrics-cert-file={missing}", f"--metrics-key-file={cert.key}"]) == 2
    )
    assert "--metrics-cert-file:" in capsys.readouterr().err
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    assert (
        main(["operator", f"--metrics-cert-file={not_pem}", f"--metrics-key-file={cert.key}"]) == 2
    )
    err = capsys.readouterr().err
    assert "not a PEM certificate" in err and "Traceback" not in err
    both = ["operator", "--metrics-insecure", f"--metrics-cert-file={cert.cert}"]
    assert main(both) == 2
    assert "contradicts" in capsys.readouterr().err
