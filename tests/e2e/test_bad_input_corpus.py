"""The bad-input corpus against the running operator: every malformed KVCacheTier and
KVCachePolicy, hostile model config.json and impossible tier is either rejected at admission
with a message naming the field, or shown as a condition with a reason. Over the whole run
the operator never crashes, never grows its memory by more than RSS_GROWTH_MAX once warm
(nor above RSS_MAX), and never writes a partial object (the targets of failing tiers stay
untouched).

A crash here is any of: the operator process exits or is replaced, /healthz fails, its log
gains a "Traceback" (kvtier logs a failed reconcile with its traceback: decide() must turn
bad input into a condition, never into an exception), or it logs a failed reconcile of a
corpus tier (a status write the API server refused, for instance).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.names.labels import TIER_ID
from kvtier.names.objects import tier_id
from localcluster import LocalCluster
from tests.conftest import api_client
from tests.e2e.bad_configs import (
    ADMISSION_EXTRAS,
    CONFIG_CASES,
    TIER_CASES,
    WORKLOAD,
    ConfigCase,
    Expect,
    TierCase,
)
from tests.e2e.conftest import create_target, llm_inference_service
from tests.e2e.kube_helpers import (
    GROUP,
    VERSION,
    apply_policy,
    condition,
    create_tier,
    new_namespace,
)
from tests.e2e.operator_process import OperatorProcess
from tests.unit.test_ready import documented_order, fine

BAD_INPUTS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "bad_inputs.yaml").read_text()
)
PLURALS = {"KVCacheTier": "kvcachetiers", "KVCachePolicy": "kvcachepolicies"}
# Memory: reading the corpus costs a one-time warm-up (the served OpenAPI documents of the
# target kinds, read at the first apply and kept: about 40 MiB for KServe's two
# LLMInferenceService versions), bounded by RSS_MAX; a leak shows as growth while every tier
# is decided again once warm, bounded by RSS_GROWTH_MAX.
RSS_MAX = 200 * 1024 * 1024
RSS_GROWTH_MAX = 10 * 1024 * 1024
POLICY: dict[str, Any] = {
    "nvmePools": [
        {
            "name": "local-nvme",
            "mountPath": "/var/mnt/nvme",
            "nodeSelector": {"kvcache.io/local-nvme": "true"},
            "capacityPerNode": "3Ti",
            "volumeSource": "Local",
        }
    ],
}
ADMISSION = "rejected at admission"
CONDITION = "condition (refused)"
ACCEPTED = "condition (valid edge, applied)"


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class Run:
    """Outcomes of the whole corpus, and the operator facts around it."""

    def __init__(self, operator: OperatorProcess, ns: str, admin_kubeconfig: Path) -> None:
        assert operator.proc is not None
        self.admin_kubeconfig = admin_kubeconfig
        self.operator = operator
        self.ns = ns
        self.pid = operator.proc.pid
        self.rss_before = rss(self.pid)
        self.log_start = operator.log_path.stat().st_size
        self.outcomes: dict[str, tuple[str, str]] = {}  # case → (input kind, outcome)
        self.targets_before: dict[str, dict[str, Any]] = {}  # failing cases' targets
        self.tiers: dict[str, tuple[str, Expect, bool]] = {}  # tier → (case, expect, fails)
        self.settled: dict[str, dict[str, Any]] = {}

    def record(self, case: str, kind: str, outcome: str) -> None:
        assert case not in self.outcomes, f"duplicate case {case}"
        self.outcomes[case] = (kind, outcome)

    def new_log(self) -> str:
        with self.operator.log_path.open("rb") as f:
            f.seek(self.log_start)
            return f.read().decode(errors="replace")


def _create(api: client.ApiClient, kind: str, metadata: dict[str, Any], spec: Any) -> None:
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": metadata, "spec": spec}
    if kind == "KVCachePolicy":
        custom.create_cluster_custom_object(GROUP, VERSION, PLURALS[kind], body)
    else:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, metadata["namespace"], PLURALS[kind], body
        )


def _target_body(name: str, case: TierCase | None) -> dict[str, Any]:
    over = case.target if case else {}
    body = llm_inference_service(
        over.get("name", name), tp=8, model_uri=over.get("uri", "hf://acme/from-config")
    )
    if "env" in over:
        body["spec"]["template"]["containers"][0]["env"] = over["env"]
    return body


def _tier_spec(target: str, extra: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mode": "Apply",
        "targetRef": {"kind": "LLMInferenceService", "name": target},
        "workload": WORKLOAD,
        "disk": {"type": "None"},
        "probe": {"enabled": False},  # kwok never finishes a probe pod
    }
    return {**spec, **extra}


def _get_target(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "serving.kserve.io", "v1alpha2", ns, "llminferenceservices", name
    )
    return cast(dict[str, Any], obj)


def _config_case(api: client.ApiClient, run: Run, case: ConfigCase) -> None:
    text = case.text()
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=case.name), data={case.key: text})
    if case.configmap_rejected:
        # Over its request-size limit the API server may answer 413/422 or just close the
        # connection; a client of its own keeps that away from the shared one.
        with api_client(run.admin_kubeconfig) as own:
            try:
                client.CoreV1Api(own).create_namespaced_config_map(run.ns, cm)
            except ApiException as exc:
                assert exc.status in (413, 422), exc.status
            except urllib3.exceptions.HTTPError:
                pass
            else:
                raise AssertionError(f"{case.name}: the API server admitted it")
        run.record(f"{case.name} (ConfigMap)", "config.json", ADMISSION)
    else:
        client.CoreV1Api(api).create_namespaced_config_map(run.ns, cm)
    target = _target_body(f"{case.name}-srv", None)
    create_target(api, run.ns, target)
    run.targets_before[case.name] = _get_target(api, run.ns, f"{case.name}-srv")
    spec = _tier_spec(
        f"{case.name}-srv", {"model": {"configMapRef": {"name": case.name, "key": "config.json"}}}
    )
    create_tier(api, run.ns, case.name, spec)
    fails = case.expect.status == "False"
    run.tiers[case.name] = (case.name, case.expect, fails)
    if not fails:
        run.targets_before.pop(case.name)


def _tier_case(api: client.ApiClient, run: Run, case: TierCase) -> None:
    target = _target_body(f"{case.name[:40]}-srv", case)
    target_name = target["metadata"]["name"]
    if case.create_target:
        create_target(api, run.ns, target)
        if case.fails:
            run.targets_before[case.name] = _get_target(api, run.ns, target_name)
    create_tier(api, run.ns, case.name, _tier_spec(target_name, case.spec))
    run.tiers[case.name] = (case.name, case.expect, case.fails)


@pytest.fixture(scope="module")
def run(cluster: LocalCluster, admin_api: client.ApiClient, operator: OperatorProcess) -> Run:
    apply_policy(admin_api, POLICY)
    ns = new_namespace(admin_api, "corpus")
    result = Run(operator, ns, cluster.admin_kubeconfig)
    # Admission: the shared corpus and the extras; nothing of it may reach the operator.
    for entry in [*BAD_INPUTS, *ADMISSION_EXTRAS]:
        default = {"name": "bad", "namespace": ns} if entry["kind"] == "KVCacheTier" else {}
        metadata = {**default, "name": default.get("name", "cluster"), **entry.get("metadata", {})}
        if entry["kind"] == "KVCacheTier":
            metadata["namespace"] = ns
        try:
            _create(admin_api, entry["kind"], metadata, entry["object"])
        except ApiException as exc:
            assert exc.status == 422, (entry["name"], exc.status, exc.body)
            assert entry["expectMessage"] in str(exc.body), (entry["name"], exc.body)
            result.record(entry["name"], entry["kind"], ADMISSION)
            continue
        raise AssertionError(f"{entry['name']}: admitted")
    for config_case in CONFIG_CASES:
        _config_case(admin_api, result, config_case)
    for tier_case in TIER_CASES:
        _tier_case(admin_api, result, tier_case)
    _settle(admin_api, result)
    return result


def _matches(tier: dict[str, Any], expect: Expect) -> bool:
    status = tier.get("status") or {}
    if status.get("observedGeneration") != tier["metadata"]["generation"]:
        return False
    c = condition(tier, expect.ctype)
    return bool(
        c
        and c["status"] == expect.status
        and (expect.reason is None or c["reason"] == expect.reason)
        and expect.words in c["message"]
    )


def _settle(api: client.ApiClient, run: Run) -> None:
    """Wait until every corpus tier shows its expected condition (or time out, recording
    what each one shows, so each case's own test reports it)."""
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + 150
    while True:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, run.ns, "kvcachetiers")[
            "items"
        ]
        run.settled = {t["metadata"]["name"]: t for t in items}
        pending = [
            name
            for name, (_, expect, _) in run.tiers.items()
            if name not in run.settled or not _matches(run.settled[name], expect)
        ]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(1)
    time.sleep(3)  # let in-flight reconciles finish before the target comparison
    for name, (_, expect, fails) in run.tiers.items():
        tier = run.settled.get(name)
        if tier is not None and _matches(tier, expect):
            run.record(
                name,
                "config.json" if name.startswith("cfg-") else "KVCacheTier",
                CONDITION if fails else ACCEPTED,
            )


def _conditions(tier: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    if tier is None:
        return []
    return [
        (c["type"], c["status"], c["reason"], c["message"][:160])
        for c in (tier.get("status") or {}).get("conditions") or []
    ]


@pytest.mark.parametrize(
    "case", [*(c.name for c in CONFIG_CASES), *(c.name for c in TIER_CASES)], ids=lambda n: n[:60]
)
def test_case_ends_in_its_condition(run: Run, case: str) -> None:
    _, expect, _ = run.tiers[case]
    tier = run.settled.get(case)
    assert tier is not None and _matches(tier, expect), (
        f"expected {expect}; the tier shows {_conditions(tier)}"
    )
    if expect.status == "False" or expect.ctype == "Conflict":
        ready = condition(tier, "Ready")
        assert ready and ready["status"] == "False" and ready["reason"]
        # The first blocker in the order docs/troubleshooting.md documents, as written.
        by_type = {c["type"]: c for c in tier["status"]["conditions"]}
        first = next(
            (
                by_type[t]
                for t in documented_order()
                if t in by_type and not fine(t, by_type[t]["status"])
            ),
            None,
        )
        assert first is not None, _conditions(tier)
        assert (ready["reason"], ready["message"]) == (first["reason"], first["message"])


def test_failing_tiers_wrote_nothing(admin_api: client.ApiClient, run: Run) -> None:
    """No partial object: the targets of failing tiers are exactly as created, and no
    storage exists for them."""
    changed = []
    for case, before in run.targets_before.items():
        after = _get_target(admin_api, run.ns, before["metadata"]["name"])
        if (
            after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
            or after["spec"] != before["spec"]
        ):
            changed.append(case)
    assert not changed, f"targets written for failing tiers: {changed}"
    core = client.CoreV1Api(admin_api)
    failing = {tier_id(run.ns, name) for name, (_, _, fails) in run.tiers.items() if fails}
    pvs = [
        pv.metadata.name
        for pv in core.list_persistent_volume().items
        if str((pv.metadata.labels or {}).get(TIER_ID)) in failing
    ]
    claims = [
        c.metadata.name
        for c in core.list_namespaced_persistent_volume_claim(run.ns).items
        if str((c.metadata.labels or {}).get(TIER_ID)) in failing
    ]
    assert not pvs and not claims, (pvs, claims)


def test_operator_survived_the_corpus(admin_api: client.ApiClient, run: Run) -> None:
    proc = run.operator.proc
    assert proc is not None and proc.pid == run.pid and proc.poll() is None, "operator exited"
    assert run.operator.healthy()
    warm = rss(run.pid)
    # Churn the corpus once more (every tier re-reconciled) before measuring memory.
    client.CustomObjectsApi(admin_api).patch_cluster_custom_object(
        GROUP, VERSION, "kvcachepolicies", "cluster", {"metadata": {"labels": {"churn": "1"}}}
    )
    for name in list(run.tiers)[:: max(1, len(run.tiers) // 10)]:
        client.CustomObjectsApi(admin_api).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            run.ns,
            "kvcachetiers",
            name,
            {"metadata": {"annotations": {"corpus/touch": uuid.uuid4().hex}}},
        )
    time.sleep(10)
    after = rss(run.pid)
    growth = after - warm
    log = run.new_log()
    failed = [line for line in log.splitlines() if f"reconcile {run.ns}/" in line]
    tracebacks = log.count("Traceback")
    kinds = sorted({k for k, _ in run.outcomes.values()})
    outcomes = [ADMISSION, CONDITION, ACCEPTED]
    table = Counter(run.outcomes.values())
    lines = [f"{'input':<14}" + "".join(f"{o:>34}" for o in outcomes) + f"{'total':>8}"]
    for kind in kinds:
        row = [table[(kind, o)] for o in outcomes]
        lines.append(f"{kind:<14}" + "".join(f"{n:>34}" for n in row) + f"{sum(row):>8}")
    lines.append(
        f"{'total':<14}"
        + "".join(f"{sum(table[(k, o)] for k in kinds):>34}" for o in outcomes)
        + f"{len(run.outcomes):>8}"
    )
    print("\nbad-input corpus outcomes:\n" + "\n".join(lines))
    print(
        f"operator: crashes 0 (pid {run.pid} alive, healthz OK), tracebacks {tracebacks}, "
        f"failed reconciles of corpus tiers {len(failed)}, RSS "
        f"{run.rss_before / 2**20:.0f} → {warm / 2**20:.0f} (warm) → {after / 2**20:.0f} MiB "
        "(every tier decided again)"
    )
    assert len(run.outcomes) >= 50
    assert tracebacks == 0, log[log.index("Traceback") - 300 :][:3000]
    assert not failed, failed[:5]
    assert after <= RSS_MAX, f"RSS {after / 2**20:.0f} MiB"
    assert growth <= RSS_GROWTH_MAX, f"RSS grew by {growth / 2**20:.0f} MiB once warm"
    expected = len(BAD_INPUTS) + len(ADMISSION_EXTRAS) + len(run.tiers)
    expected += sum(1 for c in CONFIG_CASES if c.configmap_rejected)
    assert len(run.outcomes) == expected, "some cases ended in no expected outcome"
