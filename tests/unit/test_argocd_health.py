"""The Argo CD health check for KVCacheTier, run in a real Lua 5.1 (LuaJIT) interpreter
against statuses the operator wrote (tests/fixtures/argocd, from the e2e tests) and against
the Apply-mode conditions it adds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HEALTH_LUA = REPO / "deploy" / "argocd" / "kvcachetier-health.lua"
CM_PATCH = REPO / "deploy" / "argocd" / "argocd-cm-patch.yaml"
FIXTURES = REPO / "tests" / "fixtures" / "argocd"
APPLICATIONS = REPO / "deploy" / "argocd" / "application.yaml"
HEALTH_KEY = "resource.customizations.health.kvcache.io_KVCacheTier"


def _runtime() -> Any:
    try:
        from lupa import luajit21 as lua
    except ImportError:  # platforms without LuaJIT: plain Lua 5.1
        from lupa import lua51 as lua
    return lua.LuaRuntime(unpack_returned_tuples=True)


def run_health(obj: dict[str, Any], script: str | None = None) -> dict[str, str]:
    """Evaluate the health check the way Argo CD does: `obj` is a global, the chunk returns hs."""
    rt = _runtime()
    assert "Lua 5.1" in rt.eval("_VERSION")
    rt.globals().obj = rt.table_from(obj, recursive=True)
    hs = rt.execute(script if script is not None else HEALTH_LUA.read_text())
    return {"status": str(hs.status), "message": str(hs.message or "")}


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


# Fixture written by tests/e2e/test_argocd_fixtures.py -> (health, words in the message).
FIXTURE_HEALTH = {
    "ready": ("Healthy", "Plan mode"),
    "target-missing": ("Degraded", "TargetFound: "),
    "generation-lag": ("Progressing", "observe generation"),
    "model-unknown": ("Degraded", "Sized: "),
}


@pytest.mark.parametrize("name", sorted(FIXTURE_HEALTH))
def test_operator_statuses(name: str) -> None:
    status, words = FIXTURE_HEALTH[name]
    hs = run_health(_fixture(name))
    assert hs["status"] == status, hs
    assert words in hs["message"], hs


def test_every_fixture_has_an_expectation() -> None:
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(FIXTURE_HEALTH)


def tier(
    generation: int, observed: int | None, *conditions: tuple[str, str, str]
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} says {r}"}
            for t, s, r in conditions
        ]
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": {"name": "t", "generation": generation}, "status": status}


@pytest.mark.parametrize(
    ("obj", "health", "words"),
    [
        ({"metadata": {"generation": 1}}, "Progressing", "reconcile"),
        (tier(2, 2, ("Ready", "Unknown", "Reconciling")), "Progressing", "Ready says"),
        (
            tier(
                3,
                3,
                ("Ready", "False", "Provisioning"),
                ("Sized", "True", "Sized"),
                ("Provisioned", "False", "Provisioning"),
            ),
            "Progressing",
            "Provisioned: Provisioned says Provisioning",
        ),
        (
            tier(3, 3, ("Ready", "False", "Probing"), ("Probed", "Unknown", "Probing")),
            "Progressing",
            "Ready says Probing",
        ),
        (
            tier(
                4,
                4,
                ("Ready", "False", "KVTransferConfigInUse"),
                ("Applied", "False", "Blocked"),
                ("Conflict", "True", "KVTransferConfigInUse"),
            ),
            "Degraded",
            "Conflict: Conflict says KVTransferConfigInUse",
        ),
        (
            # A failing condition that is not work in progress wins over one that is.
            tier(
                5,
                5,
                ("Ready", "False", "Provisioning"),
                ("Provisioned", "False", "Provisioning"),
                ("PolicyCompliant", "False", "UnknownNVMePool"),
            ),
            "Degraded",
            "PolicyCompliant: ",
        ),
        (
            tier(6, 6, ("Ready", "True", "Applied"), ("TierBeneficial", "False", "RecomputeWins")),
            "Healthy",
            "Ready says Applied",
        ),
        (
            # Ready computed for an older generation, even if the status claims the new one.
            {
                "metadata": {"generation": 7},
                "status": {
                    "observedGeneration": 7,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Applied",
                            "observedGeneration": 6,
                        }
                    ],
                },
            },
            "Progressing",
            "generation 7",
        ),
    ],
    ids=[
        "no-status",
        "ready-unknown",
        "provisioning",
        "probing",
        "conflict",
        "mixed-failures",
        "not-beneficial-but-ready",
        "ready-condition-lags",
    ],
)
def test_apply_mode_conditions(obj: dict[str, Any], health: str, words: str) -> None:
    hs = run_health(obj)
    assert hs["status"] == health, hs
    assert words in hs["message"], hs


def test_argocd_cm_patch_ships_the_same_lua() -> None:
    patch = yaml.safe_load(CM_PATCH.read_text())
    assert patch["metadata"]["name"] == "argocd-cm"
    assert patch["data"][HEALTH_KEY] == HEALTH_LUA.read_text()


def test_example_applications_order_and_ignore_kvtier_fields() -> None:
    apps = {a["metadata"]["name"]: a for a in yaml.safe_load_all(APPLICATIONS.read_text())}
    wave = {
        n: int(a["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
        for n, a in apps.items()
    }
    assert wave["kvtier-operator"] < wave["kvtier-tiers"]
    tiers = apps["kvtier-tiers"]["spec"]
    assert "RespectIgnoreDifferences=true" in tiers["syncPolicy"]["syncOptions"]
    ignored = {
        (d["group"], d["kind"])
        for d in tiers["ignoreDifferences"]
        if d["managedFieldsManagers"] == ["kvtier-operator"]
    }
    assert {
        ("serving.kserve.io", "LLMInferenceService"),
        ("serving.kserve.io", "InferenceService"),
    } <= ignored


def _jq_expressions(text: str) -> set[str]:
    """YAML list items that are jq paths (`- .spec...`)."""
    return {ln.strip()[2:] for ln in text.splitlines() if ln.strip().startswith("- .")}


def test_ignore_expressions_compile_and_select_kvtier_items() -> None:
    apps = list(yaml.safe_load_all(APPLICATIONS.read_text()))
    tiers = next(a for a in apps if a["metadata"]["name"] == "kvtier-tiers")["spec"]
    by_kind = {d["kind"]: d.get("jqPathExpressions") or [] for d in tiers["ignoreDifferences"]}
    applied = {
        "metadata": {"annotations": {"kvcache.io/applied": "{}"}},
        "spec": {
            "predictor": {
                "volumes": [{"name": "user"}, {"name": "kvtier-dshm"}],
                "model": {
                    "args": [
                        "--x",
                        "--kv-transfer-config",
                        '{"kv_connector":"OffloadingConnector"}',
                    ],
                    "resources": {"requests": {"memory": "1Gi"}},
                },
            }
        },
    }
    selected = [
        path
        for expression in by_kind["InferenceService"]
        for path in jq.compile(f"[path({expression})]").input_value(applied).first()
    ]
    assert ["spec", "predictor", "volumes", 1] in selected
    assert ["spec", "predictor", "volumes", 0] not in selected  # the user's own volume
    assert ["spec", "predictor", "model", "args", 1] in selected
    assert ["spec", "predictor", "model", "args", 2] in selected
    assert ["spec", "predictor", "model", "args", 0] not in selected
    for expression in by_kind["LLMInferenceService"]:
        jq.compile(expression)  # compiles
    # The README's abridged snippet names only expressions the Application really has.
    readme = (REPO / "README.md").read_text()
    known = {e for exprs in by_kind.values() for e in exprs}
    assert _jq_expressions(readme) <= known
