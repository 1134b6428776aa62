"""Kubernetes' strategic merge of a core/v1 Container or PodSpec, as far as KServe uses it
to build a predictor's pod from its ServingRuntime (`MergeRuntimeContainers`,
`MergePodSpec`, KServe v0.20): maps merge key by key, lists the API declares as merge lists
merge item by item on their key (an item only the patch has is appended), every other list
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
    out = copy.deepcopy(base)
    for item in patch:
        at = next(
            (
                i
                for i, have in enumerate(out)
                if isinstance(have, Mapping)
                and isinstance(item, Mapping)
                and key in item
                and have.get(key) == item.get(key)
            ),
            None,
        )
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = _merge_map(out[at], item, inner)
    return out


def merge_container(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A Container merged with a patch Container."""
    return _merge_map(base, patch, CONTAINER_LISTS)


def merge_pod_spec(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A PodSpec merged with a patch PodSpec."""
    return _merge_map(base, patch, POD_LISTS)
