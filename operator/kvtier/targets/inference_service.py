"""KServe InferenceService v1beta1 with the vLLM runtime: one pod template, the predictor.

KServe's CRD (v0.20) keeps its own PodSpec copy without listTypes, so `spec.predictor.volumes`,
`spec.predictor.model.args` and `spec.predictor.initContainers` are atomic lists: an apply
would replace them whole, so kvtier sets each to the user's items plus its own by a JSON
patch guarded by a `test` of the exact value read. The model container's env, volumeMounts and
resources merge, and go in the apply. The flag goes in the model container's args.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.names.objects import EVICTOR_CONTAINER
from kvtier.render.result import DesiredWrite, RenderError
from kvtier.render.scheduler import SchedulerProblem, SchedulerSync
from kvtier.targets import facts as read
from kvtier.targets.base import Conflict
from kvtier.targets.facts import TargetFacts, get
from kvtier.targets.offload import Offload
from kvtier.targets.patch import apply_write, json_patch, list_ops, with_items, with_list
from kvtier.targets.pod import (
    KV_FLAG,
    OWN_VOLUMES,
    TOP,
    PodTemplate,
    applied,
    conflict_in_container,
    metadata,
    pod_parts,
    pod_unapply_ops,
    record_ops,
    recorded,
    summary,
    unapply_patch,
    user_args,
)
from kvtier.targets.server_flags import server_flags

GROUP = "serving.kserve.io"
API_VERSION = f"{GROUP}/v1beta1"
KIND = "InferenceService"
_MODEL = ("spec", "predictor", "model")
_VOLUMES = ("spec", "predictor", "volumes")
_ARGS = (*_MODEL, "args")
_INIT = ("spec", "predictor", "initContainers")  # atomic too


class InferenceService:
    kind: str = KIND
    group: str = GROUP
    versions: tuple[str, ...] = ("v1beta1",)
    plural: str = "inferenceservices"
    schema_advice: str = (
        "install KServe's full CRDs (config/crd/full), which declare these parts granular"
    )
    reads_picker_configs: bool = False

    def facts(self, obj: Mapping[str, Any]) -> TargetFacts:
        predictor = get(obj, "spec", "predictor") or {}
        model = predictor.get("model") or {}
        args = read.str_args(model.get("args"))
        gpus, mem_req, mem_lim = read.resources(model)
        min_r = read.as_int(predictor.get("minReplicas"))
        max_r = read.as_int(predictor.get("maxReplicas"))
        replicas = max(r for r in (min_r, max_r, 1) if r is not None)
        return TargetFacts(
            kind=KIND,
            api_version=str(obj.get("apiVersion", API_VERSION)),
            model_name=(
                read.model_from_uri(model.get("storageUri")) or read.flag(args, read.MODEL_FLAGS)
            ),
            tensor_parallel_size=read.as_int(read.flag(args, read.TP_FLAGS)),
            replicas=replicas,
            node_selector=read.str_map(predictor.get("nodeSelector")),
            gpus_per_pod=gpus,
            memory_request_bytes=mem_req,
            memory_limit_bytes=mem_lim,
            server=server_flags(model),
        )

    def scheduler(
        self, obj: Mapping[str, Any], offload: Offload, layout: bool | SchedulerProblem
    ) -> SchedulerSync | SchedulerProblem | None:
        return None  # no router

    def writes(
        self,
        obj: Mapping[str, Any],
        offload: Offload,
        scheduler: SchedulerSync | SchedulerProblem | None = None,
    ) -> list[DesiredWrite] | Conflict:
        return inference_service_patch(obj, offload)

    def unapply(self, obj: Mapping[str, Any]) -> list[DesiredWrite]:
        if not recorded(obj):
            return []
        return unapply_patch(obj, pod_unapply_ops(obj, _predictor(obj), applied(obj)))

    def users_part(self, obj: Mapping[str, Any], part: str) -> bool:
        return read.users_part(obj, part)


def _predictor(target: Mapping[str, Any]) -> PodTemplate:
    """The predictor's pod: its model container runs vLLM."""
    model = get(target, *_MODEL)
    if not isinstance(model, Mapping):
        raise RenderError(
            "UnsupportedTarget",
            "the InferenceService has no spec.predictor.model (custom predictor containers "
            "are not supported)",
        )
    return PodTemplate(
        name=TOP,
        container=model,
        volumes=get(target, *_VOLUMES) or [],
        container_path=_MODEL,
        container_guard=(),
        volumes_path=_VOLUMES,
        init_containers_path=_INIT,
        args_path=_ARGS,
    )


def inference_service_patch(
    target: Mapping[str, Any], offload: Offload
) -> list[DesiredWrite] | Conflict:
    """The atomic spec.predictor.volumes and spec.predictor.model.args by a guarded JSON patch
    (the user's items kept, kvtier's added), then mounts, env and memory in
    spec.predictor.model by server-side apply."""
    pod = _predictor(target)
    container = pod.container
    own = applied(target).get("kvTransferConfig")
    where = conflict_in_container(container, own)
    if where is not None:
        return Conflict(f"spec.predictor.model already passes {KV_FLAG} in {where}")
    parts = pod_parts(target, offload, pod, mount_disk=True)
    if isinstance(parts, Conflict):
        return parts
    volumes = with_items(pod.volumes, parts.volumes, OWN_VOLUMES)
    args = [*user_args(target, container.get("args") or [], own), *offload.dtype_args]
    args += [KV_FLAG, offload.arg]
    init = with_items(get(target, *_INIT) or [], parts.init_containers, {EVICTOR_CONTAINER})
    # The init containers' guard may test the predictor the ops before have changed.
    ahead = with_list(with_list(target, _VOLUMES, volumes), _ARGS, args)
    ops = [
        *list_ops(target, _VOLUMES, volumes),
        *list_ops(target, _ARGS, args),
        *list_ops(ahead, _INIT, init),
    ]
    record = {**parts.record, "kvTransferConfig": offload.arg}
    if offload.kv_cache_dtype:
        record["kvCacheDtype"] = offload.kv_cache_dtype
    if ops:
        ops += record_ops(target, record)
    names = ", ".join(v["name"] for v in parts.volumes)
    sidecar = f", init container {EVICTOR_CONTAINER}" if parts.init_containers else ""
    lists = json_patch(
        target, ops, f"volumes {names}{sidecar} and args {KV_FLAG} beside the user's own"
    )
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata(target, record),
        "spec": {"predictor": {"model": parts.container}},
    }
    request = record["memoryRequest"]["applied"]
    return [*lists, apply_write(target, body, summary(target, offload, f"args {KV_FLAG}", request))]


INFERENCE_SERVICE = InferenceService()
