"""The event loop's client (kube/aio.py) without a server: request bodies as the official
client sends them, its TLS settings taken over, and a proxy it cannot use refused up front."""

from __future__ import annotations

import json
import ssl

import pytest
from kubernetes import client

from kvtier.kube.aio import AsyncKube, encode, ssl_context


def test_bodies_go_as_the_official_client_sends_them() -> None:
    assert encode(None) is None
    assert encode('{"already": "text"}') == b'{"already": "text"}'  # an apply's JSON text
    assert json.loads(encode({"status": {"a": [1, "x", None]}}) or b"") == {
        "status": {"a": [1, "x", None]}
    }
    big = {"bytes": 2**70}  # beyond what orjson writes: the standard library does
    assert encode(big) == json.dumps(big).encode()


def test_tls_follows_the_clients_settings() -> None:
    settings = client.Configuration()
    strict = ssl_context(settings)
    assert strict.verify_mode == ssl.CERT_REQUIRED and strict.check_hostname
    settings.assert_hostname = False
    assert not ssl_context(settings).check_hostname
    assert ssl_context(settings).verify_mode == ssl.CERT_REQUIRED
    settings.verify_ssl = False
    loose = ssl_context(settings)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname


def test_a_socks_proxy_is_refused_when_built() -> None:
    settings = client.Configuration()
    settings.proxy = "socks5://proxy.example:1080"
    with pytest.raises(ValueError, match=r"socks5://proxy\.example:1080.*not SOCKS"):
        AsyncKube(client.ApiClient(settings))
    settings.proxy = "http://proxy.example:3128"
    assert AsyncKube(client.ApiClient(settings)).proxy == "http://proxy.example:3128"
