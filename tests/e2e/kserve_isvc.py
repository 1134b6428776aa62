"""Fixtures and helpers for tests against KServe's own InferenceService controller
(hack/localcluster/kserve_isvc_controller.py): KServe v0.20.0's cmd/manager, built by
`make kserve`, running on a control plane of its own in Standard (RawDeployment) mode with its
webhooks, RBAC and ClusterServingRuntimes.

The fixtures live in tests/e2e/conftest.py, so that every module shares one cluster (a
session fixture imported into a module's namespace would start once per module):
    kserve_isvc_cluster (session fixture) -> KServeISVCCluster(cluster, api, kserve): the
        control plane (kvtier's and KServe's CRDs; no kvtier operator) with KServe's manager;
    kserve_isvc_stack (session fixture) -> KServeISVCStack(cluster, api, kserve, operator):
        the same cluster with kvtier's operator running too (kvtier's test policy applied).

API:
    plain_namespace(api, prefix) -> str: a namespace without Pod Security enforcement (KServe's
        runtimes set no seccomp profile); a test asks the `kserve_namespace` fixture for one,
        which deletes it afterwards (see delete_namespace);
    apply_runtime(api, ns, runtime) -> dict: a ServingRuntime created through KServe's webhook;
    create_isvc(api, ns, body) -> dict;
    predictor_deployments(api, ns, name) -> {deployment name: Deployment} (KServe's, by label);
    predictor_pods(api, ns, name) -> [Pod] (as the API server stored them, after KServe's pod
        webhook);
    pod_of_template(api, ns, name, template) -> Pod: a predictor pod kube-controller-manager
        created from that pod template of KServe's (waited for; it exists once admitted);
    plain(api, obj) -> dict: a typed client object as the API server's JSON;
    vllm_argv(container, pod=None) -> list[str]: the container's command and args as the
        kubelet starts them ($(VAR) references expanded from the container's env, which has
        its literal values and the pod's fieldRef values) with stub `vllm`, `python`,
        `python3` first on PATH (python playing `-m vllm.entrypoints.openai.api_server`,
        `-m huggingfaceserver` and the Hugging Face server's health check; `ray`, a Ray
        cluster of PIPELINE_PARALLEL_SIZE nodes that is up; `getent`, a worker Service of
        PIPELINE_PARALLEL_SIZE - 1 pods with this one first); the argv vLLM's parser got,
        starting with the program's name;
    kubelet_expand(text, env) -> str: the kubelet's $(VAR) expansion of one word.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from kserve_isvc_controller import KServeISVCController
from localcluster import LocalCluster
from tests.e2e.kube_helpers import eventually
from tests.e2e.operator_process import OperatorProcess

GROUP, VERSION = "serving.kserve.io", "v1beta1"
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # KServe's InferenceServicePodLabelKey
CONTAINER = "kserve-container"  # KServe's InferenceServiceContainerName
API_SERVER = "vllm.entrypoints.openai.api_server"
# KServe's Hugging Face server (kserve-huggingfaceserver-multinode): it hands its argv to
# vLLM's own argument parser (its vLLM backend), so its argv is the one vLLM reads.
HF_SERVER = "huggingfaceserver"
HF_HEALTH_CHECK = "./huggingfaceserver/health_check.py"


@dataclass
class KServeISVCCluster:
    cluster: LocalCluster
    api: client.ApiClient
    kserve: KServeISVCController


@dataclass
class KServeISVCStack(KServeISVCCluster):
    operator: OperatorProcess


def plain_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": name}))
    return name


def delete_namespace(api: client.ApiClient, name: str) -> None:
    """Deleted (not waited for) once its test is over: KServe's manager keeps reconciling
    what a test left, for the rest of the session; a multi-node service's head and worker
    Services were seen deleted and created again about 20 times a second, which kept the
    stack's API server near one core busy until the run ended."""
    try:
        client.CoreV1Api(api).delete_namespace(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def apply_runtime(api: client.ApiClient, ns: str, runtime: dict[str, Any]) -> dict[str, Any]:
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, "v1alpha1", ns, "servingruntimes", runtime
    )
    return cast(dict[str, Any], created)


def create_isvc(api: client.ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", body
    )
    return cast(dict[str, Any], created)


def get_isvc(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    got = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name
    )
    return cast(dict[str, Any], got)


def plain(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """A typed client object as the API server's JSON (camelCase keys)."""
    plain: dict[str, Any] = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return plain


def predictor_deployments(api: client.ApiClient, ns: str, name: str) -> dict[str, dict[str, Any]]:
    selector = f"{ISVC_LABEL}={name}"
    found = client.AppsV1Api(api).list_namespaced_deployment(ns, label_selector=selector)
    return {d["metadata"]["name"]: d for d in (plain(api, o) for o in found.items)}


def predictor_pods(api: client.ApiClient, ns: str, name: str) -> list[dict[str, Any]]:
    found = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{ISVC_LABEL}={name}")
    return [plain(api, p) for p in found.items]


def pod_of_template(
    api: client.ApiClient, ns: str, name: str, template: dict[str, Any]
) -> dict[str, Any]:
    """A live predictor pod of `template`, told by its vLLM container's args and memory (the
    API server adds defaults of its own, GPU requests among them)."""

    def key(spec: dict[str, Any]) -> tuple[Any, ...]:
        ctr = container(spec, CONTAINER)
        memory = [ctr["resources"].get(k, {}).get("memory") for k in ("requests", "limits")]
        return ctr.get("args"), *memory

    def check() -> dict[str, Any] | None:
        live = [
            p for p in predictor_pods(api, ns, name) if not p["metadata"].get("deletionTimestamp")
        ]
        return next((p for p in live if key(p["spec"]) == key(template["spec"])), None)

    found: dict[str, Any] = eventually(check, 120, f"a pod of {name}'s template, admitted")
    return found


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in spec["containers"] if c["name"] == name]
    return cast(dict[str, Any], found)


STUB = """\
import json, os, sys
name = os.path.basename(sys.argv[0])
pipeline = int(os.environ.get("PIPELINE_PARALLEL_SIZE", "1"))
if name == "ray":  # a Ray cluster already up, of PIPELINE_PARALLEL_SIZE nodes
    if sys.argv[1:2] == ["status"]:
        for i in range(pipeline):
            print(f" 1 node_{{i}}")
    sys.exit(0)
if name == "getent":  # the worker Service: this pod first, then the pipeline's other workers
    others = [f"10.255.0.{{i}}" for i in range(1, pipeline - 1)]
    for ip in [os.environ["POD_IP"], *others]:
        print(f"{{ip}} {{sys.argv[2]}}")
    sys.exit(0)
if name.startswith("python") and sys.argv[1:2] == ["{health}"]:
    sys.exit(0)  # the Ray cluster's nodes registered
if name.startswith("python") and sys.argv[1:3] not in (["-m", "{api}"], ["-m", "{hf}"]):
    sys.exit(f"stub {{name}}: only -m {api} and -m {hf} are played")
open(os.environ["STUB_ARGV"], "w").write(json.dumps([name, *sys.argv[1:]]))
"""


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion of a command or args word (or an env value): `$(NAME)` of a
    defined variable is its value, of an undefined one stays as written, `$$` is `$`
    (Kubernetes' third_party/forked/golang/expansion.Expand, with MappingFuncFor)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        close = text.find(")", i + 2) if nxt == "(" else -1
        if nxt == "$":
            out.append("$")
        elif close >= 0:
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
            continue
        else:  # `$x`, or a `$(` never closed: as written
            out.append(text[i : i + 2])
        i += 2
    return "".join(out)


def vllm_argv(ctr: dict[str, Any], pod: dict[str, Any] | None = None) -> list[str]:
    """The words vLLM gets from the container's command and args, run as the kubelet starts
    them: env values in order (each expanded with the ones before it; fieldRef ones from the
    pod's name, namespace and IP), then command and args expanded with the whole env; the
    stubs first on PATH."""
    fields = {}
    if pod is not None:
        fields = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"]["namespace"],
            "status.podIP": pod.get("status", {}).get("podIP", ""),
        }
    env: dict[str, str] = {}
    for e in ctr.get("env") or []:
        if "value" in e:
            env[e["name"]] = kubelet_expand(e["value"], env)
        elif (ref := e.get("valueFrom", {}).get("fieldRef")) and ref["fieldPath"] in fields:
            env[e["name"]] = fields[ref["fieldPath"]]
    words = [
        kubelet_expand(w, env) for w in [*(ctr.get("command") or []), *(ctr.get("args") or [])]
    ]
    with tempfile.TemporaryDirectory(prefix="kserve-isvc-vllm-") as tmp:
        for name in ("vllm", "python", "python3", "ray", "getent"):
            stub = Path(tmp) / name
            stub.write_text(
                f"#!{sys.executable}\n"
                + STUB.format(api=API_SERVER, hf=HF_SERVER, health=HF_HEALTH_CHECK)
            )
            stub.chmod(0o755)
        argv_file = Path(tmp) / "argv.json"
        env |= {"PATH": f"{tmp}:/usr/local/bin:/usr/bin:/bin", "STUB_ARGV": str(argv_file)}
        # With env given, subprocess looks the program up on env's PATH: the stubs first.
        proc = subprocess.run(words, env=env, cwd=tmp, capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and argv_file.exists(), proc.stderr[-3000:]
        argv: list[str] = json.loads(argv_file.read_text())
        return argv
