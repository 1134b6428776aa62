"""Which image probe Jobs run: the operator's own pod's, else RELATED_IMAGE_KVTIER_OPERATOR,
else KVTIER_IMAGE, else the built-in default (kvtier.controller.registration.probe_image)."""

from __future__ import annotations

from typing import Any

from kvtier.controller.registration import probe_image


class FakeKube:
    def __init__(self, pod: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.pod, self.fail = pod, fail
        self.asked: list[tuple[str, str, str, str | None]] = []

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        self.asked.append((api_version, kind, name, namespace))
        if self.fail:
            raise RuntimeError("forbidden")
        return self.pod


def pod(image: str) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {"name": "sidecar", "image": "other:1"},
                {"name": "operator", "image": image},
            ]
        }
    }


ENV = {
    "KVTIER_POD_NAME": "kvtier-operator-abc",
    "KVTIER_NAMESPACE": "kvtier-system",
    "RELATED_IMAGE_KVTIER_OPERATOR": "registry.example/kvtier:from-env",
}


def test_the_pods_own_image_wins() -> None:
    """A kustomize overlay's `images:` changes the container image, not the env value."""
    kube = FakeKube(pod("registry.example/kvtier@sha256:" + "a" * 64))
    assert probe_image(kube, ENV) == "registry.example/kvtier@sha256:" + "a" * 64  # type: ignore[arg-type]
    assert kube.asked == [("v1", "Pod", "kvtier-operator-abc", "kvtier-system")]


def test_related_image_when_the_pod_cannot_be_read() -> None:
    for kube in (FakeKube(fail=True), FakeKube(None), FakeKube({"spec": {"containers": []}})):
        assert probe_image(kube, ENV) == "registry.example/kvtier:from-env"  # type: ignore[arg-type]


def test_fallbacks_without_a_pod_name() -> None:
    kube = FakeKube(pod("never:asked"))
    env = {k: v for k, v in ENV.items() if k != "KVTIER_POD_NAME"}
    assert probe_image(kube, env) == "registry.example/kvtier:from-env"  # type: ignore[arg-type]
    assert probe_image(kube, {"KVTIER_IMAGE": "old:1"}) == "old:1"  # type: ignore[arg-type]
    assert probe_image(kube, {}) is None  # type: ignore[arg-type]
    assert kube.asked == []
