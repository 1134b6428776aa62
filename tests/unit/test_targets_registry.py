"""The target registry: one entry per kind, lookups that refuse what is not registered (naming
the known kinds), and kind modules that never import each other."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtier.controller.cache import Cache, version_preference
from kvtier.controller.schemas import WATCHED_GROUPS
from kvtier.controller.watches import target_versions, watches
from kvtier.kube.rest import PLURALS
from kvtier.render.result import RenderError
from kvtier.targets import registry
from kvtier.targets.registry import (
    KINDS,
    api_versions,
    kind_named,
    known_kinds,
    target_facts,
    target_kind,
    target_patch,
    unapply_writes,
)
from tests.unit.test_render_targets import _isvc, _offload, _v1alpha1, _v1alpha2

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "kvtier"
KNOWN = (
    "InferenceService serving.kserve.io/v1beta1, "
    "LLMInferenceService serving.kserve.io/v1alpha1|v1alpha2, "
    "Deployment apps/v1, StatefulSet apps/v1, "
    "LeaderWorkerSet leaderworkerset.x-k8s.io/v1"
)


def _daemonset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "args": ["serve"]}]}}},
    }


def test_every_kind_is_registered_once() -> None:
    assert len({(k.group, k.kind) for k in KINDS}) == len(KINDS)
    assert len({k.kind for k in KINDS}) == len(KINDS)  # kind names alone pick the facts
    assert len({k.plural for k in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert kind.versions, kind.kind
        assert len(set(kind.versions)) == len(kind.versions), kind.kind
        assert kind.plural == kind.plural.lower()


def test_the_known_kinds_read_as_the_refusal_says_them() -> None:
    assert known_kinds() == KNOWN
    assert api_versions(kind_named("LLMInferenceService")) == (
        "serving.kserve.io/v1alpha2",
        "serving.kserve.io/v1alpha1",
    )


@pytest.mark.parametrize("load", [_isvc, _v1alpha1, _v1alpha2])
def test_a_registered_target_is_its_kind(load: Any) -> None:
    obj = load()
    assert target_kind(obj) is kind_named(obj["kind"])
    assert target_facts(obj).kind == obj["kind"]


@pytest.mark.parametrize(
    "lookup",
    [
        target_facts,
        target_kind,
        lambda obj: target_patch(obj, _offload()),
        lambda obj: kind_named(obj["kind"]),
    ],
)
def test_an_unregistered_kind_is_refused_naming_the_known_kinds(lookup: Any) -> None:
    with pytest.raises(RenderError) as refused:
        lookup(_daemonset())
    assert refused.value.reason == "UnsupportedTarget"
    assert refused.value.message.startswith("DaemonSet ")
    assert refused.value.message.endswith(f"is not a supported target ({KNOWN})")


def test_an_unregistered_kind_is_never_read_as_another_one() -> None:
    """Anything but an InferenceService used to be read as an LLMInferenceService."""
    with pytest.raises(RenderError) as refused:
        target_facts(_daemonset())
    assert refused.value.condition == "TargetFound"


def test_an_unregistered_version_of_a_kind_is_read_but_not_written() -> None:
    obj = _v1alpha2()
    obj["apiVersion"] = "serving.kserve.io/v1alpha9"
    assert target_facts(obj).kind == "LLMInferenceService"
    with pytest.raises(RenderError) as refused:
        target_patch(obj, _offload())
    assert refused.value.message == (
        f"LLMInferenceService serving.kserve.io/v1alpha9 is not a supported target ({KNOWN})"
    )
    assert refused.value.condition == "Provisioned"


def test_nothing_to_take_back_from_a_target_without_a_record() -> None:
    assert unapply_writes(_daemonset()) == []


def test_decide_refuses_an_unregistered_kind_as_target_not_found() -> None:
    from kvtier.policy.contract import Facts
    from kvtier.policy.decide import decide
    from tests.unit.test_decide import NODES, NOW, POLICY, tier

    decision = decide(Facts(tier(), POLICY, _daemonset(), None, NODES, NOW))
    found = next(c for c in decision.status["conditions"] if c["type"] == "TargetFound")
    assert (found["status"], found["reason"]) == ("False", "UnsupportedTarget")
    assert KNOWN in found["message"]
    assert decision.writes == []


def test_the_rest_client_the_cache_and_the_schema_watch_read_the_registry() -> None:
    for kind in KINDS:
        assert PLURALS[kind.kind] == (kind.plural, True)
        for related in kind.reads:  # what it reads, as the informers need it
            assert PLURALS[related.kind] == (related.plural, related.namespaced)
        assert version_preference(kind.kind) == api_versions(kind)
        assert kind.group in WATCHED_GROUPS
    assert version_preference("DaemonSet") == ()


def test_each_target_kind_is_watched_once_in_its_preferred_served_version() -> None:
    cache = Cache()
    assert target_versions(cache) == {k.kind: api_versions(k)[0] for k in KINDS}
    assert cache.watched == {}  # nothing discovered: no view is known to be the fed one
    last = {k.kind: api_versions(k)[-1] for k in KINDS}
    cache.served = {kind: {version} for kind, version in last.items()}
    assert target_versions(cache) == last
    # Only a kind with several versions has a fed view to tell from the others.
    assert cache.watched == {k.kind: last[k.kind] for k in KINDS if len(k.versions) > 1}
    watched = [
        (w.api_version, w.kind)
        for w, _ in watches(last)
        if w.kind in last and w.label_selector is None  # not kvtier's own objects' watches
    ]
    assert watched == [(last[k.kind], k.kind) for k in KINDS]


def test_the_operator_watches_a_kind_added_to_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvtier.controller import watches as watches_module

    fake = _FakeKind()
    monkeypatch.setattr(watches_module, "KINDS", (*KINDS, fake))
    versions = target_versions(Cache())
    assert versions["Fake"] == "example.com/v1"
    assert ("example.com/v1", "Fake") in {(w.api_version, w.kind) for w, _ in watches(versions)}


class _FakeKind:
    """A kind that is registered nowhere but in a test's patched registry."""

    kind = "Fake"
    group = "example.com"
    versions = ("v1", "v1beta1")
    plural = "fakes"
    schema_advice = "install the fake CRD"
    reads_picker_configs = False
    reads = ()


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_kind_modules_never_import_each_other() -> None:
    modules = {type(kind).__module__ for kind in KINDS}
    assert len(modules) == len(KINDS)  # one module per kind
    for module in sorted(modules):
        path = Path(str(sys.modules[module].__file__))
        assert path.parent == PACKAGE / "targets", module
        others = sorted((modules - {module}) & _imports(path))
        assert not others, f"{module} imports {others}"


def test_the_registry_is_the_one_list() -> None:
    """The kind modules are imported by the registry alone among the targets package."""
    modules = {type(kind).__module__ for kind in KINDS}
    for path in sorted((PACKAGE / "targets").glob("*.py")):
        if path.stem in ("registry", *(m.rsplit(".", 1)[-1] for m in modules)):
            continue
        assert not modules & _imports(path), f"targets/{path.name} imports a kind module"
    assert registry.KINDS is KINDS
