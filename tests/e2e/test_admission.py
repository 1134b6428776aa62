"""The generated CRDs on a real kube-apiserver: examples are admitted, every entry of the
bad-input corpus is rejected with a message that names its field, and a target kind or
apiVersion the target registry does not hold is refused with a message naming those it does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.targets.registry import KINDS, api_versions
from localcluster import LocalCluster
from tests.e2e.kube_helpers import new_namespace

REPO = Path(__file__).resolve().parents[2]
BAD_INPUTS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "bad_inputs.yaml").read_text()
)
PLURALS = {"KVCacheTier": "kvcachetiers", "KVCachePolicy": "kvcachepolicies"}


@pytest.fixture(scope="module")
def crds(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "deploy" / "crds"))
    cluster.wait_established("kvcachetiers.kvcache.io", "kvcachepolicies.kvcache.io")


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, crds: None) -> str:
    return new_namespace(admin_api, "admission")


def _create(
    api: client.ApiClient, kind: str, metadata: dict[str, Any], spec: Any, dry_run: bool = True
) -> None:
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": "kvcache.io/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}
    dry = "All" if dry_run else None
    if kind == "KVCachePolicy":
        try:
            custom.create_cluster_custom_object(
                "kvcache.io", "v1alpha1", PLURALS[kind], body, dry_run=dry
            )
        except ApiException as exc:
            if exc.status != 409 or not dry_run:
                raise
            # The one policy may exist already (another module on this control plane wrote
            # it): the same object, in full, as an update of that one.
            stored: Any = custom.get_cluster_custom_object(
                "kvcache.io", "v1alpha1", PLURALS[kind], metadata["name"]
            )
            version = stored["metadata"]["resourceVersion"]
            body["metadata"] = {**metadata, "resourceVersion": version}
            custom.replace_cluster_custom_object(
                "kvcache.io", "v1alpha1", PLURALS[kind], metadata["name"], body, dry_run=dry
            )
    else:
        custom.create_namespaced_custom_object(
            "kvcache.io", "v1alpha1", metadata["namespace"], PLURALS[kind], body, dry_run=dry
        )


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_admitted(admin_api: client.ApiClient, ns: str, path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        meta = dict(doc["metadata"])
        if doc["kind"] == "KVCacheTier":
            meta["namespace"] = ns
        _create(admin_api, doc["kind"], meta, doc["spec"])


def test_corpus_is_large_enough() -> None:
    assert len(BAD_INPUTS) >= 15
    assert {e["kind"] for e in BAD_INPUTS} == set(PLURALS)


@pytest.mark.parametrize("entry", BAD_INPUTS, ids=lambda e: e["name"])
def test_bad_input_is_rejected_naming_the_field(
    admin_api: client.ApiClient, ns: str, entry: dict[str, Any]
) -> None:
    default_meta = (
        {"name": "bad", "namespace": ns} if entry["kind"] == "KVCacheTier" else {"name": "cluster"}
    )
    metadata = {**default_meta, **entry.get("metadata", {})}
    if entry["kind"] == "KVCacheTier":
        metadata["namespace"] = ns
    with pytest.raises(ApiException) as rejected:
        _create(admin_api, entry["kind"], metadata, entry["object"])
    assert rejected.value.status == 422, rejected.value.body
    assert entry["expectMessage"] in str(rejected.value.body)


def _refusal(api: client.ApiClient, ns: str, target_ref: dict[str, Any]) -> str:
    spec = {
        "targetRef": target_ref,
        "workload": {"averageContextTokens": 50000, "concurrentSessions": 64},
    }
    with pytest.raises(ApiException) as rejected:
        _create(api, "KVCacheTier", {"name": "unknown-kind", "namespace": ns}, spec)
    assert rejected.value.status == 422, rejected.value.body
    message: str = json.loads(rejected.value.body or "{}")["message"]
    return message


def test_a_kind_that_is_not_registered_is_refused_naming_the_known_kinds(
    admin_api: client.ApiClient, ns: str
) -> None:
    message = _refusal(admin_api, ns, {"kind": "DaemonSet", "name": "vllm"})
    known = ", ".join(f'"{k.kind}"' for k in KINDS)
    assert f'spec.targetRef.kind: Unsupported value: "DaemonSet": supported values: {known}' in (
        message
    ), message


def test_an_api_version_its_kind_is_not_registered_in_is_refused_naming_the_known_ones(
    admin_api: client.ApiClient, ns: str
) -> None:
    for kind in KINDS:
        # A well-formed apiVersion that no registered kind is written in.
        ref = {"kind": kind.kind, "name": "vllm", "apiVersion": "example.com/v1"}
        message = _refusal(admin_api, ns, ref)
        assert "spec.targetRef.apiVersion: Invalid value" in message, message
        assert (
            f"spec.targetRef.apiVersion example.com/v1 is not a version kvtier supports for "
            f"{kind.kind}: {', '.join(api_versions(kind))}"
        ) in message, message


def test_every_registered_kind_and_version_is_admitted(
    admin_api: client.ApiClient, ns: str
) -> None:
    spec = {"workload": {"averageContextTokens": 50000, "concurrentSessions": 64}}
    for kind in KINDS:
        for api_version in (None, *api_versions(kind)):
            ref = {"kind": kind.kind, "name": "vllm"}
            if api_version is not None:
                ref["apiVersion"] = api_version
            _create(
                admin_api,
                "KVCacheTier",
                {"name": "known", "namespace": ns},
                {**spec, "targetRef": ref},
            )


BAD_SCHEDULES = ["61 25 * * *", "0 25 * * *", "0 0 32 * *", "0 0 * 13 *", "*/0 * * * *", "@often"]
GOOD_SCHEDULES = ["@daily", "*/15 2 * * MON-FRI", "0 3 1,15 * *", "30 4 * jan-mar sun"]


@pytest.mark.parametrize("schedule", BAD_SCHEDULES)
def test_a_probing_schedule_out_of_range_is_refused_naming_the_rule(
    admin_api: client.ApiClient, crds: None, schedule: str
) -> None:
    """The CRD's CEL rule on the real kube-apiserver: a schedule with a field out of its range
    (minute 61, hour 25), a step of 0 or an unknown macro never reaches the operator, which
    would only stop re-probing."""
    with pytest.raises(ApiException) as rejected:
        _create(
            admin_api, "KVCachePolicy", {"name": "cluster"}, {"probing": {"schedule": schedule}}
        )
    assert rejected.value.status == 422, rejected.value.body
    message: str = json.loads(rejected.value.body or "{}")["message"]
    assert "spec.probing.schedule: Invalid value" in message, message
    if not schedule.startswith("@"):  # a macro of the right shape fails the pattern first
        assert f'spec.probing.schedule "{schedule}" is not a cron schedule' in message, message
        assert "minute 0-59, hour 0-23, day of month 1-31" in message, message


@pytest.mark.parametrize("schedule", GOOD_SCHEDULES)
def test_a_cron_schedule_is_admitted(
    admin_api: client.ApiClient, crds: None, schedule: str
) -> None:
    _create(admin_api, "KVCachePolicy", {"name": "cluster"}, {"probing": {"schedule": schedule}})
