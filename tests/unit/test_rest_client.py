"""load_client: the client's token refresh runs at most once per interval, not per request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import configuration

from kvtier.kube.rest import TOKEN_REFRESH_SECONDS, load_client, throttled

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: operator
  user: {token: secret-token}
contexts:
- name: local
  context: {cluster: local, user: operator}
current-context: local
"""


def test_requests_reuse_the_token_without_rereading_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    settings = load_client(str(path)).configuration
    reads: list[int] = []

    def getproxies() -> dict[str, str]:
        reads.append(1)
        return {}

    monkeypatch.setattr(configuration, "getproxies", getproxies)

    keys = {settings.get_api_key_with_prefix("BearerToken") for _ in range(100)}

    assert keys == {"Bearer secret-token"}
    assert len(reads) <= 1  # the library's hook alone re-reads it on each of the 100


def test_throttled_runs_the_hook_once_per_interval_and_stays_installed() -> None:
    now = [1000.0]
    calls: list[configuration.Configuration] = []
    settings: Any = configuration.Configuration()  # its hook attribute is typed None

    def loader_hook(s: Any) -> None:
        # As the client's loaders do: refresh, then install a new hook of their own.
        calls.append(s)
        s.refresh_api_key_hook = lambda again: loader_hook(again)

    wrapper = throttled(loader_hook, every=TOKEN_REFRESH_SECONDS, clock=lambda: now[0])
    settings.refresh_api_key_hook = wrapper

    def request() -> None:
        settings.refresh_api_key_hook(settings)

    request()
    request()
    now[0] += TOKEN_REFRESH_SECONDS - 0.1
    request()
    assert len(calls) == 1  # the first request runs it, later ones within the interval do not
    now[0] += 0.1
    request()
    assert len(calls) == 2  # due again once the interval has passed
    assert settings.refresh_api_key_hook is wrapper
