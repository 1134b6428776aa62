"""One write per target per change, on the real CRDs (KServe's, LWS's, the built-in apps/v1):
for every target kind the tier's first application is one write of kvtier's to the target
(the API server's audit log) and one generation; each of 20 forced re-applies of the user's
manifest by another field manager (a pipeline's `kubectl apply --server-side
--force-conflicts`, which takes kvtier's flag and memory back) costs exactly its own
generation plus one restoring write (a write the API server refused, 409, is counted apart:
it changes nothing). The atomic lists that write carries whole are guarded:
a write rendered from a read the object has moved past is refused (409), never overwrites
what changed meanwhile."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import time
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvtier.controller.cache import Cache
from kvtier.controller.writer import Writer
from kvtier.kube.aio import AsyncKube
from kvtier.kube.rest import Kube
from kvtier.names.records import APPLIED_ANNOTATION
from kvtier.render import DesiredWrite
from localcluster import LocalCluster
from tests.conftest import api_client
from tests.e2e import audit
from tests.e2e.conftest import inference_service, llm_inference_service
from tests.e2e.kube_helpers import (
    apply_policy,
    create_tier,
    eventually,
    new_namespace,
    wait_condition,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator_apply import POLICY
from tests.e2e.test_target_apps import workload
from tests.e2e.test_target_lws import user_lws

PIPELINE = "platform-pipeline"  # the user's own field manager
ROUNDS = 20
WORKLOAD = {"averageContextTokens": 20000, "concurrentSessions": 8}
PLURALS = {
    "InferenceService": "inferenceservices",
    "LLMInferenceService": "llminferenceservices",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "LeaderWorkerSet": "leaderworkersets",
}


def manifests() -> dict[str, dict[str, Any]]:
    """One user manifest per target kind, each setting the memory (and, where kvtier's flag
    goes in args, the args) that kvtier overwrites, so a forced re-apply takes them back."""
    model = "hf://meta-llama/Llama-3.1-70B-Instruct"
    isvc = inference_service("isvc", tp=4, model_uri=model)
    llmisvc = llm_inference_service("llmisvc", tp=4, model_uri=model)
    lws = user_lws("worker-dp")
    lws["metadata"] = {"name": "lws"}
    apps = {kind: workload(kind, kind.lower()) for kind in ("Deployment", "StatefulSet")}
    for body in apps.values():
        # The request too: Kubernetes refuses a re-apply that would leave kvtier's raised
        # request above the user's limit (a manifest with a limit alone cannot be re-applied
        # by a pipeline that does not carry the live memory, as Argo CD's ignoreDifferences do).
        vllm = body["spec"]["template"]["spec"]["containers"][0]
        vllm["resources"]["requests"] = {"memory": vllm["resources"]["limits"]["memory"]}
    return {
        "InferenceService": isvc,
        "LLMInferenceService": llmisvc,
        **apps,
        "LeaderWorkerSet": lws,
    }


def _path(ns: str, body: dict[str, Any]) -> str:
    group, _, version = body["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return f"{base}/namespaces/{ns}/{PLURALS[body['kind']]}/{body['metadata']['name']}"


def pipeline_apply(api: client.ApiClient, ns: str, body: dict[str, Any]) -> None:
    """The user's manifest, as their pipeline applies it: its own manager, forced."""
    Kube(api).request(
        "PATCH",
        _path(ns, body),
        json.dumps({**body, "metadata": {**body["metadata"], "namespace": ns}}),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": PIPELINE, "force": "true"},
    )


def live(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = Kube(api).request("GET", _path(ns, body))
    return found


def generation(api: client.ApiClient, ns: str, body: dict[str, Any]) -> int:
    return int(live(api, ns, body)["metadata"]["generation"])


def target_writes(
    cluster: LocalCluster, ns: str, body: dict[str, Any], since: float
) -> Counter[int]:
    """kvtier's write requests to the target itself since `since`, by the API server's
    answer (the audit log): 200 for a write it took, 409 for one it refused."""
    audit.writes(cluster.audit_log, since=since)  # fails if the log records nothing
    answers: Counter[int] = Counter()
    for line in cluster.audit_log.read_text().splitlines():
        entry = json.loads(line)
        ref = entry.get("objectRef") or {}
        if (
            entry.get("stage") == "ResponseComplete"
            and entry.get("verb") in audit.WRITE_VERBS
            and entry.get("user", {}).get("username") == audit.OPERATOR_USER
            and (ref.get("resource"), ref.get("namespace"), ref.get("name"), ref.get("subresource"))
            == (PLURALS[body["kind"]], ns, body["metadata"]["name"], None)
            and _epoch(entry["stageTimestamp"]) >= since
        ):
            answers[int(entry.get("responseStatus", {}).get("code", 0))] += 1
    return answers


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def reached(api: client.ApiClient, ns: str, body: dict[str, Any], want: int) -> bool:
    return generation(api, ns, body) >= want


def settled(api: client.ApiClient, ns: str, body: dict[str, Any], want: int) -> None:
    """The target reaches generation `want` and stays there (no further write follows)."""
    eventually(functools.partial(reached, api, ns, body, want), 60, f"generation {want}")
    time.sleep(3)  # kvtier reacts in well under a second: a second write would show by now
    assert generation(api, ns, body) == want


@pytest.fixture(scope="module")
def ns(admin_api: client.ApiClient, operator: OperatorProcess) -> str:
    apply_policy(admin_api, POLICY)
    return new_namespace(admin_api, "onewrite")


@pytest.mark.parametrize("kind", list(PLURALS))
def test_one_write_per_change_and_per_forced_reapply(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str, kind: str
) -> None:
    body = manifests()[kind]
    start = time.time()
    pipeline_apply(admin_api, ns, body)
    assert generation(admin_api, ns, body) == 1
    name = body["metadata"]["name"]
    create_tier(
        admin_api,
        ns,
        name,
        {
            "mode": "Apply",
            "targetRef": {"kind": kind, "name": name},
            "workload": WORKLOAD,
            "disk": {"type": "None"},
        },
    )
    wait_condition(admin_api, ns, name, "Applied", "True", timeout=90)
    settled(admin_api, ns, body, 2)
    assert target_writes(cluster, ns, body, start)[200] == 1
    applied = live(admin_api, ns, body)
    assert APPLIED_ANNOTATION in applied["metadata"]["annotations"]

    begin = time.time()
    seen: list[int] = []
    for _ in range(ROUNDS):
        before = generation(admin_api, ns, body)
        pipeline_apply(admin_api, ns, body)
        # The re-apply changed the spec (its own generation), and kvtier restores it.
        eventually(
            functools.partial(reached, admin_api, ns, body, before + 2),
            30,
            f"kvtier's restoring write after generation {before + 1}",
        )
        seen.append(generation(admin_api, ns, body))
    settled(admin_api, ns, body, 2 + 2 * ROUNDS)
    assert seen == [2 + 2 * r for r in range(1, ROUNDS + 1)]
    answers = target_writes(cluster, ns, body, begin)
    # One write taken per re-apply. Where the object's own controller writes its status right
    # after each change of the spec (a Deployment's, a StatefulSet's), the status may move
    # between kvtier's read and its apply: the API server refuses that apply (409, nothing
    # changed) and the writer sends it again. Refused attempts are reported, never taken.
    print(f"{kind}: kvtier's requests to the target over {ROUNDS} re-applies: {dict(answers)}")
    assert answers[200] == ROUNDS
    assert set(answers) <= {200, 409}
    restored = live(admin_api, ns, body)
    assert restored["spec"] == applied["spec"]  # each restore put back the whole tier


def test_a_write_from_a_stale_read_is_refused(
    cluster: LocalCluster, admin_api: client.ApiClient, ns: str
) -> None:
    """kvtier's write carries the atomic args whole: rendered from a read the user's change of
    the args has since moved past (a new generation), the writer does not send it (409) and
    refreshes its cache from the server, so nothing of the user's change is lost; a change of
    the status alone (the object's own controller) does not stop it."""
    body = inference_service("stale", tp=4, model_uri="hf://meta-llama/Llama-3.1-70B-Instruct")
    pipeline_apply(admin_api, ns, body)
    read = live(admin_api, ns, body)
    model = read["spec"]["predictor"]["model"]
    meta = read["metadata"]

    def write(args: list[str]) -> DesiredWrite:
        return DesiredWrite(
            "Apply",
            read["apiVersion"],
            read["kind"],
            meta["name"],
            meta["namespace"],
            {
                "apiVersion": read["apiVersion"],
                "kind": read["kind"],
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "spec": {"predictor": {"model": {"args": args}}},
            },
            "args carried whole, rendered from the read",
            ("spec.predictor.model.args",),
            meta["generation"],
        )

    cache = Cache()
    writer = Writer(AsyncKube(api_client(cluster.operator_kubeconfig)), cache)
    # The status moves (as KServe's controller writes it): the write still goes through.
    Kube(admin_api).request(
        "PATCH",
        _path(ns, body) + "/status",
        {"status": {"url": "http://stale.example"}},
        content_type="application/merge-patch+json",
    )
    first = asyncio.run(writer.send(write([*model["args"], "--enforce-eager"])))
    assert first["spec"]["predictor"]["model"]["args"][-1] == "--enforce-eager"
    changed = copy.deepcopy(body)
    changed["spec"]["predictor"]["model"]["args"].append("--enable-prefix-caching")
    pipeline_apply(admin_api, ns, changed)  # the user's change: a new generation
    with pytest.raises(ApiException) as err:
        asyncio.run(writer.send(write([*model["args"], "--kv-transfer-config"])))
    assert err.value.status == 409
    now = live(admin_api, ns, body)
    assert now["spec"]["predictor"]["model"]["args"][-1] == "--enable-prefix-caching"
    cached = cache.targets[("InferenceService", ns, "stale")]
    assert (
        next(iter(cached.values()))["metadata"]["resourceVersion"]
        == (now["metadata"]["resourceVersion"])
    )
