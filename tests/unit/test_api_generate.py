"""`python -m kvtier.generate` writes deterministic CRDs, the API reference and the chart's
target RBAC, the target kinds read from their registry, and detects drift."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier import generate
from kvtier.generate import (
    DEFAULT_TARGETS_RBAC,
    check,
    check_targets_rbac,
    crd_documents,
    generated_files,
    main,
    render_targets_rbac,
    write,
)
from kvtier.targets import registry

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "deploy" / "crds"
FILES = {"kvcache.io_kvcachetiers.yaml", "kvcache.io_kvcachepolicies.yaml"}


def test_generated_file_names() -> None:
    assert set(generated_files()) == FILES


def test_output_is_deterministic() -> None:
    assert generated_files() == generated_files()


def test_committed_crds_are_up_to_date() -> None:
    assert check(COMMITTED) == [], "run `python -m kvtier.generate --write`"


def test_generated_files_are_valid_crds() -> None:
    for content in generated_files().values():
        (document,) = list(yaml.safe_load_all(content))
        assert document["kind"] == "CustomResourceDefinition"


def test_write_then_check_round_trip(tmp_path: Path) -> None:
    assert main(["--write", "--dir", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == FILES
    assert main(["--check", "--dir", str(tmp_path)]) == 0


def test_check_fails_with_a_diff_after_a_modification(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(COMMITTED, crds)
    target = crds / "kvcache.io_kvcachetiers.yaml"
    target.write_text(target.read_text().replace("maxItems: 32", "maxItems: 33", 1))
    assert main(["--check", "--dir", str(crds)]) == 1
    out = capsys.readouterr().out
    assert "-                maxItems: 33" in out or "maxItems: 33" in out
    assert "(generated)" in out


def test_check_fails_when_a_file_is_missing(tmp_path: Path) -> None:
    write(tmp_path)
    (tmp_path / "kvcache.io_kvcachepolicies.yaml").unlink()
    assert main(["--check", "--dir", str(tmp_path)]) == 1


def test_module_entry_point_checks_committed_files() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kvtier.generate", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_target_rbac_is_up_to_date() -> None:
    assert check_targets_rbac(REPO / DEFAULT_TARGETS_RBAC) == [], (
        "run `python -m kvtier.generate --write`"
    )


def test_a_stale_target_rbac_is_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "targets.yaml"
    stale.write_text(render_targets_rbac().replace(", patch]", "]"))
    args = ["--dir", str(COMMITTED), "--targets-rbac", str(stale)]
    assert main(["--check", *args]) == 1
    assert f"{stale} is stale" in capsys.readouterr().err
    assert main(["--write", "--dir", str(tmp_path / "crds"), "--targets-rbac", str(stale)]) == 0
    assert main(["--check", *args]) == 0


def _target_ref(documents: dict[str, Any]) -> dict[str, Any]:
    schema = documents["KVCacheTier"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node: dict[str, Any] = schema["properties"]["spec"]["properties"]["targetRef"]
    return node


def _api_version_rule(target_ref: dict[str, Any]) -> dict[str, str]:
    rules: list[dict[str, str]] = target_ref["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r["fieldPath"] == ".apiVersion"]
    return rule


def test_the_crd_names_the_registered_kinds_and_their_versions() -> None:
    target_ref = _target_ref(crd_documents())
    assert target_ref["properties"]["kind"]["enum"] == [k.kind for k in registry.KINDS]
    rule = _api_version_rule(target_ref)
    for kind in registry.KINDS:
        for api_version in registry.api_versions(kind):
            assert f"'{api_version}'" in rule["rule"]
            assert api_version in rule["message"]
        assert f"'{kind.kind}'" in rule["messageExpression"]


def test_the_chart_may_read_and_patch_each_registered_kind_and_only_read_what_they_read() -> None:
    rules = yaml.safe_load(render_targets_rbac())
    by_verbs: dict[tuple[str, ...], set[tuple[str, str]]] = {}
    for rule in rules:
        granted = {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
        by_verbs.setdefault(tuple(rule["verbs"]), set()).update(granted)
    assert by_verbs.pop(("get", "list", "watch", "patch")) == {
        (k.group, k.plural) for k in registry.KINDS
    }
    reads = {(r.api_version.rpartition("/")[0], r.plural) for k in registry.KINDS for r in k.reads}
    assert by_verbs == {("get", "list", "watch"): reads}


class _Fake:
    kind = "FakeServer"
    group = "example.com"
    versions = ("v1", "v1beta1")
    plural = "fakeservers"
    schema_advice = "install the fake CRD"
    reads_picker_configs = False
    reads = ()


def test_a_kind_added_to_the_registry_reaches_the_crd_and_the_rbac(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before_crds, before_rbac = generated_files(), render_targets_rbac()
    monkeypatch.setattr(registry, "KINDS", (*registry.KINDS, _Fake()))
    target_ref = _target_ref(crd_documents())
    assert target_ref["properties"]["kind"]["enum"][-1] == "FakeServer"
    assert "FakeServer" in target_ref["properties"]["kind"]["description"]
    rule = _api_version_rule(target_ref)
    assert "'FakeServer': ['example.com/v1', 'example.com/v1beta1']" in rule["rule"]
    assert "FakeServer: example.com/v1, example.com/v1beta1" in rule["message"]
    assert "'FakeServer': 'example.com/v1, example.com/v1beta1'" in rule["messageExpression"]
    rules = yaml.safe_load(render_targets_rbac())
    fake = {
        "apiGroups": ["example.com"],
        "resources": ["fakeservers"],
        "verbs": ["get", "list", "watch", "patch"],
    }
    assert fake in rules
    # The other kinds' rules as they were.
    assert yaml.safe_load(before_rbac) == [r for r in rules if r != fake]
    # Only the KVCacheTier CRD names target kinds; the committed files are now stale.
    after = generated_files()
    assert (
        after["kvcache.io_kvcachepolicies.yaml"] == before_crds["kvcache.io_kvcachepolicies.yaml"]
    )
    assert after["kvcache.io_kvcachetiers.yaml"] != before_crds["kvcache.io_kvcachetiers.yaml"]
    assert check(COMMITTED) != []
    assert check_targets_rbac(REPO / DEFAULT_TARGETS_RBAC) != []
    assert "FakeServer" in generate.api_doc()


def test_a_kind_in_the_group_of_another_joins_its_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = registry.KINDS[0]
    sibling = type("Sibling", (_Fake,), {"group": first.group, "plural": "siblings"})()
    monkeypatch.setattr(registry, "KINDS", (*registry.KINDS, sibling))
    rules = yaml.safe_load(render_targets_rbac())
    (rule,) = [r for r in rules if r["apiGroups"] == [first.group] and "patch" in r["verbs"]]
    assert rule["resources"][-1] == "siblings"
