"""Kubernetes' strategic merge of a core/v1 Container or PodSpec, as far as KServe uses it
to build a predictor's pod from its ServingRuntime (`MergeRuntimeContainers`,
`MergePodSpec`, KServe v0.20): maps merge key by key, lists the API declares as merge lists
merge item by item on their key (in the order apimachinery gives them), every other list
and every scalar is replaced by the patch's. Only the patch strategy of core/v1 is modelled
(no `$patch` directives, which a ServingRuntime or InferenceService never carries); kvtier's
result is tested against KServe's own functions (hack/oracles/kserve).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# The merge lists of core/v1, by field name, with their merge key (k8s.io/api/core/v1 types.go
# patchMergeKey tags), and what an item of each is, for the lists inside it.
CONTAINER_LISTS: Mapping[str, str] = {
    "ports": "containerPort",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}
POD_LISTS: Mapping[str, str] = {
    "volumes": "name",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
_CONTAINER_KINDS = {"containers", "initContainers", "ephemeralContainers"}


def _merge_map(
    base: Mapping[str, Any], patch: Mapping[str, Any], lists: Mapping[str, str]
) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge_map(out[key], value, {})
        elif isinstance(value, list) and key in lists and isinstance(out.get(key), list):
            inner = CONTAINER_LISTS if key in _CONTAINER_KINDS else {}
            out[key] = _merge_list(out[key], value, lists[key], inner)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(base: list[Any], patch: list[Any], key: str, inner: Mapping[str, str]) -> list[Any]:
    """Items merged by `key`, in the order apimachinery's normalizeElementOrder gives them:
    the patch's items in the patch's order, and each item only the base has put back before
    the first patch item that comes after it in the base."""
    keyed = [i for i in patch if isinstance(i, Mapping) and key in i]
    merged = {i[key]: copy.deepcopy(i) for i in base if isinstance(i, Mapping) and key in i}
    for item in keyed:
        have = merged.get(item[key])
        merged[item[key]] = (
            _merge_map(have, item, inner) if have is not None else copy.deepcopy(item)
        )
    ours = [merged[i[key]] for i in keyed]
    theirs = [
        merged[i[key]]
        for i in base
        if isinstance(i, Mapping) and i.get(key) in merged and i[key] not in {k[key] for k in keyed}
    ]
    where = {i[key]: n for n, i in enumerate(base) if isinstance(i, Mapping) and key in i}
    out: list[Any] = []
    while theirs or ours:
        if theirs and ours:
            left, right = where.get(theirs[0][key]), where.get(ours[0][key])
            take_theirs = left is not None and right is not None and left < right
        else:
            take_theirs = bool(theirs)
        out.append((theirs if take_theirs else ours).pop(0))
    return out


def merge_container(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A Container merged with a patch Container."""
    return _merge_map(base, patch, CONTAINER_LISTS)


def merge_pod_spec(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A PodSpec merged with a patch PodSpec."""
    return _merge_map(base, patch, POD_LISTS)
