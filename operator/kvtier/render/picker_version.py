"""The endpoint picker's version as KServe v0.20 resolves it for an LLMInferenceService.

KServe reads the version annotation from the spec it merges for the object (docs/llm-d.md):
the scheduler preset first, then each `spec.baseRefs` entry in list order, then the object's
own spec, each later one winning key by key. A config name is looked up in the object's
namespace, then in KServe's own; one found in neither stops KServe (`ConfigNotFound`), so
kvtier does not know the version either. Merged without the annotation, the version is
`0.0.0`: KServe applies no version-gated migration, and the scorer keeps its parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.render.scheduler import VERSION_ANNOTATION, SchedulerProblem, at_path

SCHEDULER_PATH = ("spec", "router", "scheduler")
CONFIG_KIND = "LLMInferenceServiceConfig"
# KServe's default for its POD_NAMESPACE and for LLM_INFERENCE_SERVICE_CONFIG_PREFIX.
KSERVE_NAMESPACE = "kserve"
PRESET = "kserve-config-llm-scheduler"
# With versioned configs (KServe's default) the preset's name is pinned here at the first
# reconcile, and read from here after.
PINNED_PRESET = "serving.kserve.io/config-llm-scheduler"
ABSENT_VERSION = "0.0.0"
PRODUCER_FROM = (0, 9, 0)
VERSION_UNKNOWN_REASON = "SchedulerVersionUnknown"

ConfigKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class PickerVersion:
    """The version KServe gives the picker, and where it comes from (for messages)."""

    value: str
    source: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _annotation(spec_holder: Any) -> str | None:
    """The version annotation a spec sets; "" when set empty (KServe reads that as absent,
    but it still hides what earlier specs set)."""
    annotations = at_path(spec_holder, (*SCHEDULER_PATH, "annotations"))
    if not isinstance(annotations, Mapping) or VERSION_ANNOTATION not in annotations:
        return None
    value = annotations[VERSION_ANNOTATION]
    return "" if value is None else str(value)


def base_ref_names(target: Mapping[str, Any]) -> list[str]:
    refs = at_path(target, ("spec", "baseRefs"))
    if not isinstance(refs, list):
        return []
    return [str(r["name"]) for r in refs if isinstance(r, Mapping) and r.get("name")]


def preset_name(target: Mapping[str, Any]) -> str:
    """The scheduler preset's name: the one KServe pinned in the object's status, else its
    default."""
    pinned = at_path(target, ("status", "annotations", PINNED_PRESET))
    return str(pinned) if pinned else PRESET


def config_keys(target: Mapping[str, Any], kserve_namespace: str) -> list[ConfigKey]:
    """Where the configs the version may come from can be: each name in the object's namespace
    and in KServe's (what the operator reads and watches for the target)."""
    namespace = str(_meta(target).get("namespace") or "")
    names = [preset_name(target), *base_ref_names(target)]
    return [(ns, name) for name in names for ns in dict.fromkeys((namespace, kserve_namespace))]


def find_config(
    name: str,
    namespace: str,
    configs: Mapping[ConfigKey, Mapping[str, Any]],
    kserve_namespace: str,
) -> Mapping[str, Any] | None:
    """KServe's lookup: the object's namespace first, then KServe's own."""
    return configs.get((namespace, name)) or configs.get((kserve_namespace, name))


def _preset_applies(target: Mapping[str, Any], bases: Sequence[Mapping[str, Any] | None]) -> bool:
    """KServe adds the scheduler preset when the object merged with its baseRefs (each over
    the object, in this first pass) has a scheduler whose pool names no existing pool."""
    layers = [target, *(b for b in bases if b is not None)]
    if not any(isinstance(at_path(layer, SCHEDULER_PATH), Mapping) for layer in layers):
        return False
    pool_ref = None
    for layer in layers:
        name = at_path(layer, (*SCHEDULER_PATH, "pool", "ref", "name"))
        if name:
            pool_ref = name
    return not pool_ref


def picker_version(
    target: Mapping[str, Any],
    configs: Mapping[ConfigKey, Mapping[str, Any]],
    kserve_namespace: str = KSERVE_NAMESPACE,
) -> PickerVersion | SchedulerProblem:
    """The version KServe merges for the target's picker from the LLMInferenceServiceConfigs
    read (by (namespace, name)), or why kvtier cannot know it."""
    own = _annotation(target)
    if own is not None:
        return PickerVersion(
            own or ABSENT_VERSION, f"spec.router.scheduler.annotations {VERSION_ANNOTATION}"
        )
    namespace = str(_meta(target).get("namespace") or "")
    names = base_ref_names(target)
    bases = [find_config(n, namespace, configs, kserve_namespace) for n in names]
    layers: list[tuple[str, Mapping[str, Any] | None]] = list(zip(names, bases, strict=True))
    if _preset_applies(target, bases):
        preset = preset_name(target)
        layers.insert(0, (preset, find_config(preset, namespace, configs, kserve_namespace)))
    for name, config in reversed(layers):
        if config is None:
            return SchedulerProblem(
                VERSION_UNKNOWN_REASON,
                f"{CONFIG_KIND} {name} is in neither namespace {namespace} nor KServe's "
                f"{kserve_namespace} (KServe stops at it too, ConfigNotFound): kvtier cannot "
                f"tell the endpoint picker's version ({VERSION_ANNOTATION}) and writes no "
                "scheduler values",
            )
        value = _annotation(config)
        if value is not None:
            where = _meta(config).get("namespace")
            return PickerVersion(
                value or ABSENT_VERSION, f"{CONFIG_KIND} {where}/{name} {VERSION_ANNOTATION}"
            )
    return PickerVersion(ABSENT_VERSION, f"no {VERSION_ANNOTATION} in the merged spec")


def picker_layout(
    target: Mapping[str, Any],
    configs: Mapping[ConfigKey, Mapping[str, Any]],
    kserve_namespace: str = KSERVE_NAMESPACE,
) -> bool | SchedulerProblem:
    """Whether the target's endpoint picker keeps the index in the producer plugin, by its
    version as KServe merges it from the configs read, or why that is unknown."""
    version = picker_version(target, configs, kserve_namespace)
    return version if isinstance(version, SchedulerProblem) else producer_layout(version)


def producer_layout(version: PickerVersion) -> bool | SchedulerProblem:
    """Whether KServe strips the scorer's parameters for this picker (0.9.0 and later, where
    the index lives in the producer plugin), by KServe's semantic-version rules: X.Y.Z with
    an optional pre-release (below its release) and build; anything else fails KServe's
    reconcile, and kvtier does not guess."""
    core, _, pre = version.value.split("+")[0].partition("-")
    parts = core.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return SchedulerProblem(
            VERSION_UNKNOWN_REASON,
            f"{version.source}: {version.value!r} is not a semantic version X.Y.Z (KServe "
            "fails to reconcile the picker too); kvtier writes no scheduler values",
        )
    numbers = tuple(int(p) for p in parts)
    return numbers > PRODUCER_FROM or (numbers == PRODUCER_FROM and not pre)
