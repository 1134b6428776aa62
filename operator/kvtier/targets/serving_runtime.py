"""The pod KServe builds for an InferenceService's predictor from its ServingRuntime (or
ClusterServingRuntime), as KServe v0.20's InferenceService controller does it:

- which runtime (`reconcileModel`, `GetSupportingRuntimes`): the one spec.predictor.model.runtime
  names (a ServingRuntime of the namespace before a ClusterServingRuntime of that name), else
  the first that is enabled, single-model, supports the model format (only the formats with
  autoSelect) and the protocol, and is multi-node exactly when the predictor has a
  workerSpec: the namespace's runtimes before the cluster's, each group sorted by protocol,
  newest first, then name, and then by the format's priority (highest first, none last);
- the container (`MergeRuntimeContainers`): the runtime's `kserve-container` merged with the
  predictor's model container by strategic merge, the args concatenated (runtime's first),
  the image's tag set to spec.predictor.model.runtimeVersion when given (`UpdateImageTag`);
- the pod (`MergePodSpec`): the runtime's nodeSelector, affinity, tolerations, volumes,
  imagePullSecrets and schedulerName merged with the predictor's pod fields.

Pure; the oracle is KServe's own code (hack/oracles/kserve, tests/unit/test_serving_runtime.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtier.targets.facts import get
from kvtier.targets.strategic_merge import merge_container, merge_pod_spec

GROUP = "serving.kserve.io"
SERVING_RUNTIME = "ServingRuntime"
CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime"
RUNTIME_API_VERSION = f"{GROUP}/v1alpha1"
CONTAINER = "kserve-container"  # the runtime container KServe merges with the model's
WORKER_CONTAINER = "worker-container"
# Red Hat's runtimes name their vLLM release here; their image tags are product versions.
RUNTIME_VERSION_ANNOTATION = "opendatahub.io/runtime-version"

# The fields of a core/v1 Container (the rest of spec.predictor.model is KServe's own).
CONTAINER_FIELDS = frozenset(
    (
        "name",
        "image",
        "command",
        "args",
        "workingDir",
        "ports",
        "envFrom",
        "env",
        "resources",
        "resizePolicy",
        "restartPolicy",
        "restartPolicyRules",
        "volumeMounts",
        "volumeDevices",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "imagePullPolicy",
        "securityContext",
        "stdin",
        "stdinOnce",
        "tty",
    )
)
# The fields of a core/v1 PodSpec (the predictor's others are KServe's component settings).
POD_FIELDS = frozenset(
    (
        "volumes",
        "initContainers",
        "containers",
        "ephemeralContainers",
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "dnsPolicy",
        "nodeSelector",
        "serviceAccountName",
        "serviceAccount",
        "automountServiceAccountToken",
        "nodeName",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "shareProcessNamespace",
        "securityContext",
        "imagePullSecrets",
        "hostname",
        "subdomain",
        "affinity",
        "schedulerName",
        "tolerations",
        "hostAliases",
        "priorityClassName",
        "priority",
        "dnsConfig",
        "readinessGates",
        "runtimeClassName",
        "enableServiceLinks",
        "preemptionPolicy",
        "overhead",
        "topologySpreadConstraints",
        "setHostnameAsFQDN",
        "os",
        "hostUsers",
        "schedulingGates",
        "resourceClaims",
        "resources",
    )
)
# The runtime's pod fields MergePodSpec takes.
RUNTIME_POD_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "volumes",
    "imagePullSecrets",
    "schedulerName",
)
_PROTOCOL_ORDER = {"v1": 1, "v2": 2, "grpc-v1": 3, "grpc-v2": 4}  # KServe's ProtocolVersion
_TAG = re.compile(r"(:([\w.\-_]*))$")


@dataclass(frozen=True)
class Runtime:
    """The runtime KServe picks for the predictor."""

    kind: str  # ServingRuntime or ClusterServingRuntime
    name: str
    obj: Mapping[str, Any]

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.obj.get("spec") or {}

    @property
    def annotations(self) -> Mapping[str, Any]:
        return get(self.obj, "metadata", "annotations") or {}


@dataclass(frozen=True)
class NoRuntime:
    """Why KServe picks no runtime (the predictor then gets no pod)."""

    message: str


@dataclass(frozen=True)
class MergedPod:
    """The predictor's pod as KServe builds it: its vLLM container and pod fields."""

    runtime: Runtime
    container: dict[str, Any]
    pod: dict[str, Any]
    worker_container: dict[str, Any] | None = None
    worker_pod: dict[str, Any] | None = None
    worker: Mapping[str, Any] = field(default_factory=dict)  # the merged workerSpec sizes

    @property
    def runtime_container(self) -> Mapping[str, Any]:
        return _container(self.runtime.spec.get("containers"), CONTAINER) or {}

    @property
    def runtime_resources(self) -> Mapping[str, Any] | None:
        """The resources the predictor inherits from its runtime's container."""
        resources = self.runtime_container.get("resources")
        return resources if isinstance(resources, Mapping) else None


def _model(isvc: Mapping[str, Any]) -> Mapping[str, Any]:
    return get(isvc, "spec", "predictor", "model") or {}


def _format_label(model: Mapping[str, Any]) -> str:
    fmt = model.get("modelFormat") or {}
    version = fmt.get("version")
    return f"mt:{fmt.get('name')}" + (f":{version}" if version is not None else "")


def _supported_labels(spec: Mapping[str, Any], named: bool) -> set[str]:
    labels = set()
    for fmt in spec.get("supportedModelFormats") or []:
        if named or fmt.get("autoSelect") is True:
            labels.add(f"mt:{fmt.get('name')}")
            if fmt.get("version") is not None:
                labels.add(f"mt:{fmt.get('name')}:{fmt.get('version')}")
    return labels


def _protocol_ok(spec: Mapping[str, Any], protocol: str) -> bool:
    versions = spec.get("protocolVersions") or []
    return not protocol or not versions or protocol in versions


def _protocol_rank(spec: Mapping[str, Any]) -> int:
    versions = spec.get("protocolVersions") or []
    return min((_PROTOCOL_ORDER.get(v, 0) for v in versions), default=0)


def _priority(spec: Mapping[str, Any], fmt: str | None) -> int | None:
    for entry in spec.get("supportedModelFormats") or []:
        if entry.get("name") == fmt:
            value = entry.get("priority")
            return int(value) if isinstance(value, int) else None
    return None


def _listing_order(runtimes: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """KServe's sortServingRuntimeList: protocol rank, newest first, then name."""
    by_name = sorted(runtimes, key=lambda r: str(get(r, "metadata", "name")))
    newest = sorted(
        by_name, key=lambda r: str(get(r, "metadata", "creationTimestamp") or ""), reverse=True
    )
    return sorted(newest, key=lambda r: _protocol_rank(r.get("spec") or {}))


def _by_priority(runtimes: list[Mapping[str, Any]], fmt: str | None) -> list[Mapping[str, Any]]:
    """sortSupportedRuntimeByPriority: with a priority first, highest first (stable)."""

    def key(r: Mapping[str, Any]) -> tuple[int, int]:
        p = _priority(r.get("spec") or {}, fmt)
        return (1, 0) if p is None else (0, -p)

    return sorted(runtimes, key=key)


def select_runtime(
    isvc: Mapping[str, Any], runtimes: Sequence[Mapping[str, Any]]
) -> Runtime | NoRuntime:
    """The runtime KServe picks for the InferenceService, from the ServingRuntimes of its
    namespace and the ClusterServingRuntimes in `runtimes`."""
    namespace = get(isvc, "metadata", "namespace")
    model = _model(isvc)
    protocol = str(model.get("protocolVersion") or "v1")
    local = [
        r
        for r in runtimes
        if r.get("kind") == SERVING_RUNTIME and get(r, "metadata", "namespace") == namespace
    ]
    cluster = [r for r in runtimes if r.get("kind") == CLUSTER_SERVING_RUNTIME]
    named = model.get("runtime")
    if isinstance(named, str) and named:
        found = next((r for r in local if get(r, "metadata", "name") == named), None)
        found = found or next((r for r in cluster if get(r, "metadata", "name") == named), None)
        if found is None:
            return NoRuntime(f"runtime {named} (spec.predictor.model.runtime) is not found")
        spec = found.get("spec") or {}
        if spec.get("disabled") is True:
            return NoRuntime(f"runtime {named} is disabled")
        if not _protocol_ok(spec, str(model.get("protocolVersion") or "")):
            return NoRuntime(f"runtime {named} does not support the protocol version")
        if _format_label(model) not in _supported_labels(spec, named=True):
            return NoRuntime(f"runtime {named} does not support the model format")
        return Runtime(str(found.get("kind")), named, found)
    multinode = get(isvc, "spec", "predictor", "workerSpec") is not None
    label = _format_label(model)
    fmt = (model.get("modelFormat") or {}).get("name")

    def fits(r: Mapping[str, Any]) -> bool:
        spec = r.get("spec") or {}
        return (
            spec.get("disabled") is not True
            and spec.get("multiModel") is not True
            and label in _supported_labels(spec, named=False)
            and _protocol_ok(spec, protocol)
            and (spec.get("workerSpec") is not None) == multinode
        )

    ordered = [
        *_by_priority([r for r in _listing_order(local) if fits(r)], fmt),
        *_by_priority([r for r in _listing_order(cluster) if fits(r)], fmt),
    ]
    if not ordered:
        return NoRuntime(f"no runtime supports model format {label[3:]}")
    first = ordered[0]
    return Runtime(str(first.get("kind")), str(get(first, "metadata", "name")), first)


def _container(containers: Any, name: str) -> Mapping[str, Any] | None:
    return next(
        (c for c in containers or [] if isinstance(c, Mapping) and c.get("name") == name), None
    )


def _merged_container(
    runtime: Mapping[str, Any], isvc_container: Mapping[str, Any]
) -> dict[str, Any]:
    own = {k: v for k, v in isvc_container.items() if k in CONTAINER_FIELDS}
    merged = merge_container(runtime, own)
    merged["args"] = [*(runtime.get("args") or []), *(own.get("args") or [])]
    if not merged["args"]:
        del merged["args"]
    if not own.get("name"):
        merged["name"] = runtime.get("name")
    # An env entry that ends up with both value and valueFrom: the predictor's wins.
    theirs = {e.get("name"): e for e in own.get("env") or [] if isinstance(e, Mapping)}
    for entry in merged.get("env") or []:
        if "value" in entry and "valueFrom" in entry and entry.get("name") in theirs:
            if "valueFrom" in theirs[entry["name"]]:
                del entry["value"]
            elif theirs[entry["name"]].get("value"):
                del entry["valueFrom"]
    return merged


def _with_tag(image: Any, version: Any) -> Any:
    """UpdateImageTag for a given runtimeVersion (a digest is kept)."""
    if not isinstance(image, str) or not isinstance(version, str) or "@sha256:" in image:
        return image
    return _TAG.sub(":" + version, image) if _TAG.search(image) else f"{image}:{version}"


def _runtime_pod(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in RUNTIME_POD_FIELDS if spec.get(k) is not None}


def merged_pod(isvc: Mapping[str, Any], runtime: Runtime) -> MergedPod | NoRuntime:
    """The predictor's pod (and, multi-node, the worker's) KServe builds with `runtime`."""
    spec = runtime.spec
    base = _container(spec.get("containers"), CONTAINER)
    if base is None:
        return NoRuntime(f"runtime {runtime.name} has no container {CONTAINER}")
    predictor = get(isvc, "spec", "predictor") or {}
    model = _model(isvc)
    container = _merged_container(base, model)
    container["image"] = _with_tag(container.get("image"), model.get("runtimeVersion"))
    own_pod = {k: v for k, v in predictor.items() if k in POD_FIELDS}
    pod = merge_pod_spec(_runtime_pod(spec), own_pod)
    worker_spec = predictor.get("workerSpec")
    runtime_worker = spec.get("workerSpec")
    if not isinstance(worker_spec, Mapping) or not isinstance(runtime_worker, Mapping):
        return MergedPod(runtime, container, pod)
    worker_base = _container(runtime_worker.get("containers"), WORKER_CONTAINER)
    if worker_base is None:
        return NoRuntime(f"runtime {runtime.name} has no workerSpec container {WORKER_CONTAINER}")
    theirs = (worker_spec.get("containers") or [{}])[0]
    worker_container = _merged_container(worker_base, theirs)
    own_worker_pod = {
        k: v
        for k, v in worker_spec.items()
        if k not in ("pipelineParallelSize", "tensorParallelSize", "containers")
    }
    worker_pod = merge_pod_spec(_runtime_pod(runtime_worker), own_worker_pod)
    sizes = {
        key: worker_spec.get(key) or runtime_worker.get(key) or 1
        for key in ("pipelineParallelSize", "tensorParallelSize")
    }
    # KServe gives both containers the sizes as env, which their args reference as $(VAR).
    for merged in (container, worker_container):
        for name, key in (
            ("PIPELINE_PARALLEL_SIZE", "pipelineParallelSize"),
            ("TENSOR_PARALLEL_SIZE", "tensorParallelSize"),
        ):
            _set_env(merged, name, str(sizes[key]))
    return MergedPod(runtime, container, pod, worker_container, worker_pod, sizes)


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    """AddEnvVarToPodSpec: the variable's value replaced, else the variable appended."""
    entries = container.setdefault("env", [])
    for entry in entries:
        if entry.get("name") == name:
            entry["value"] = value
            return
    entries.append({"name": name, "value": value})
