"""The router's view of the CPU tier: the llm-d inference scheduler's CPU-tier prefix scorer.

llm-d's scheduler (the endpoint picker) keeps, per endpoint, an LRU index of the prefix
blocks it routed there. For the CPU tier its guide configures a second `prefix-cache-scorer`
named `cpu-prefix-cache-scorer` with `autoTune: false` (vLLM reports no CPU-tier capacity to
tune from) and `lruCapacityPerServer` set by hand, in blocks of the scorer's
`blockSizeTokens` (16 when unset). kvtier knows that capacity exactly: the CPU tier behind one
endpoint divided by the bytes of one scorer block.

The format pinned here (docs/llm-d.md): an EndpointPickerConfig of
`inference.networking.x-k8s.io/v1alpha1`, inline in an LLMInferenceService's
`spec.router.scheduler.config.inline` or in the ConfigMap key `config.ref` names (KServe v0.20
passes either text to the picker as `--config-text`), with the scorer's parameters of
gateway-api-inference-extension v1.4 to v1.6 and llm-d-inference-scheduler v0.8. Anything else
(another apiVersion or kind, an unknown parameter, the character-based `blockSize` of older
releases) is reported, never guessed at, and so is a config the picker's own loader would
refuse once kvtier's values are in, or whose index another plugin sizes (the rules its loader
showed: hack/oracles/epp, docs/llm-d.md). The ConfigMap's text is written by
render/scheduler_configmap.py from the same `config_sync`. KServe v0.20 strips the scorer's
parameters for an endpoint picker of 0.9.0 or later (its version annotation; KServe's preset
default): that picker (llm-d router v0.9.0) indexes in the approx-prefix-cache-producer the
scorer names, whose same two parameters kvtier then sets, in its blocks of at least 64 tokens.

`inline` preserves unknown fields, so its `plugins` list is atomic: kvtier sets it to the
list it read with only the CPU scorer's two parameters changed, by a JSON patch guarded by a
test of the list read (targets/llm_inference_service.py); the user's values are kept in
kvtier's record and given back with the tier.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.targets.offload import DECODE, PREFILL, RoleOffload

CONFIG_PATH = ("spec", "router", "scheduler", "config")
PLUGINS_PATH = (*CONFIG_PATH, "inline", "plugins")
CONFIG_API = ("inference.networking.x-k8s.io/v1alpha1", "EndpointPickerConfig")
SCORER_TYPE = "prefix-cache-scorer"
CPU_SCORER = "cpu-prefix-cache-scorer"
CAPACITY = "lruCapacityPerServer"
AUTO_TUNE = "autoTune"
BLOCK_TOKENS = "blockSizeTokens"
MAX_TOKENS = "maxPrefixTokensToMatch"
DEFAULT_BLOCK_TOKENS = 16
KNOWN_PARAMETERS = frozenset(
    {
        AUTO_TUNE,
        BLOCK_TOKENS,
        "blockSize",
        "maxPrefixBlocksToMatch",
        MAX_TOKENS,
        CAPACITY,
    }
)
UNKNOWN_CONFIG_REASON = "SchedulerConfigUnknown"
CONFIG_REF_REASON = "SchedulerConfigRef"
DEFAULT_REF_KEY = "epp"  # KServe v0.20's data key when config.ref names none
DROPPED_REASON = "SchedulerParametersDropped"
# KServe v0.20 reads the endpoint picker's version from this pod annotation
# (spec.router.scheduler.annotations; its preset kserve-config-llm-scheduler sets 0.9.0) and,
# from 0.9.0 on, removes every prefix-cache-scorer parameter but prefixMatchInfoProducerName
# from the config text (the index moved to the approx-prefix-cache-producer plugin).
VERSION_ANNOTATION = "app.kubernetes.io/version"
KSERVE_PICKER_VERSION = "0.9.0"
# llm-d router v0.9.0: the scorer reads the match data of the producer it names; the
# producer indexes blocks of at least 64 tokens whatever its blockSizeTokens says.
PRODUCER_TYPE = "approx-prefix-cache-producer"
PRODUCER_NAME = "prefixMatchInfoProducerName"
PRODUCER_MIN_BLOCK_TOKENS = 64


@dataclass(frozen=True)
class SchedulerSync:
    """The CPU scorer in step with the tier: its plugins list as kvtier writes it."""

    plugin: str
    block_size_tokens: int
    capacity: int  # lruCapacityPerServer, blocks per endpoint
    roles: tuple[str, ...]  # the roles whose scheduling profiles use the scorer
    plugins: list[dict[str, Any]]
    record: dict[str, Any]  # the user's values, for kvtier's record
    # (name, data key) of the ConfigMap holding the config; None when it is inline.
    configmap: tuple[str, str] | None = None

    def status(self) -> dict[str, Any]:
        """status.plan.scheduler."""
        return {
            "plugin": self.plugin,
            "blockSizeTokens": self.block_size_tokens,
            "lruCapacityPerServer": self.capacity,
            "roles": list(self.roles),
            **(
                {"configMap": {"name": self.configmap[0], "key": self.configmap[1]}}
                if self.configmap
                else {}
            ),
        }


@dataclass(frozen=True)
class SchedulerProblem:
    """A scheduler config kvtier does not write: the reason and what to do."""

    reason: str
    message: str


def at_path(obj: Any, path: Sequence[str]) -> Any:
    """The value at `path` in nested maps, else None."""
    for key in path:
        if not (isinstance(obj, (dict, Mapping))):
            return None
        obj = obj.get(key)
    return obj


def _user_value(current: Any, record: Any) -> Any:
    """The user's value: the recorded base while the field holds what kvtier wrote."""
    if isinstance(record, Mapping) and current == record.get("applied"):
        return record.get("base")
    return current


def _served_roles(config: Mapping[str, Any], name: str, roles: Sequence[str]) -> list[str]:
    """The roles whose scheduling profile references the plugin: a profile named `prefill`
    picks prefill endpoints (KServe's P/D config), any other decode ones."""
    served: list[str] = []
    for profile in config.get("schedulingProfiles") or []:
        if not isinstance(profile, Mapping):
            continue
        refs = [p.get("pluginRef") for p in profile.get("plugins") or [] if isinstance(p, Mapping)]
        if name not in refs:
            continue
        role = PREFILL if profile.get("name") == PREFILL and PREFILL in roles else DECODE
        if role not in served:
            served.append(role)
    return served


def config_ref(target: Mapping[str, Any]) -> tuple[str, str] | None:
    """(ConfigMap name, data key) of `spec.router.scheduler.config.ref` (KServe's key
    defaults to `epp`), or None when the config is inline or absent."""
    config = at_path(target, CONFIG_PATH)
    if not isinstance(config, Mapping) or isinstance(config.get("inline"), Mapping):
        return None
    ref = config.get("ref")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    return str(ref["name"]), str(ref.get("key") or DEFAULT_REF_KEY)


def ref_capacity(roles: Sequence[RoleOffload]) -> int | None:
    """The capacity to set by hand in a referenced config: the decode tier behind one
    endpoint in 16-token blocks; None without the roles' bytes per token."""
    if not roles or roles[0].bytes_per_token <= 0:
        return None
    return blocks(roles[0].endpoint_cpu_bytes, roles[0].bytes_per_token, DEFAULT_BLOCK_TOKENS)


def scheduler_sync(
    target: Mapping[str, Any],
    roles: Sequence[RoleOffload],
    record: Mapping[str, Any],
    layout: bool | SchedulerProblem,
) -> SchedulerSync | SchedulerProblem | None:
    """The CPU scorer's capacity from the tier for the target's inline config, a problem,
    or None when the target's scheduler config enables no CPU-tier prefix scorer (or is in
    a ConfigMap: render/scheduler_configmap.py). `record` is kvtier's record on the target
    (its `scheduler` entry holds the user's values). `layout`: picker_layout() of the
    picker's version as KServe merges it (render/picker_version.py)."""
    config = at_path(target, CONFIG_PATH)
    inline = config.get("inline") if isinstance(config, Mapping) else None
    if not isinstance(inline, Mapping):
        return None
    own = at_path(record, ("scheduler",)) or {}
    return config_sync(inline, roles, own, "spec.router.scheduler.config.inline", layout)


def config_sync(
    config: Mapping[str, Any],
    roles: Sequence[RoleOffload],
    own: Mapping[str, Any],
    where: str,
    producer: bool | SchedulerProblem = False,
) -> SchedulerSync | SchedulerProblem | None:
    """The CPU scorer's capacity from the tier for one EndpointPickerConfig (inline or read
    from a ConfigMap), a problem, or None when it enables no CPU-tier prefix scorer. `own`
    is kvtier's record of the user's values; `where` names the config in messages.
    `producer`: the picker keeps the index in the approx-prefix-cache-producer the scorer
    names (0.9.0 and later), whose parameters kvtier sets instead of the scorer's; a problem
    when the picker's version is unknown, reported only where a CPU scorer would be set."""
    plugins = config.get("plugins")
    if not isinstance(plugins, list):
        return None
    index = _named(plugins, CPU_SCORER)
    if index is None:
        return None
    version = (config.get("apiVersion"), config.get("kind"))
    if version != CONFIG_API:
        return SchedulerProblem(
            UNKNOWN_CONFIG_REASON,
            f"{where}: {version[1]} {version[0]} is not a scheduler config kvtier knows "
            f"({CONFIG_API[1]} {CONFIG_API[0]}); kvtier leaves it alone",
        )
    if isinstance(producer, SchedulerProblem):
        return producer
    scorer = plugins[index]
    if scorer.get("type") != SCORER_TYPE:
        return SchedulerProblem(
            UNKNOWN_CONFIG_REASON,
            f"{where} plugin {CPU_SCORER} has type {scorer.get('type')!r}, not {SCORER_TYPE}; "
            "kvtier leaves it alone",
        )
    # A role without its bytes per token (an Offload built without roles) has no block count.
    by_role = {r.role: r for r in roles if r.bytes_per_token > 0}
    served = _served_roles(config, CPU_SCORER, list(by_role))
    floor = PRODUCER_MIN_BLOCK_TOKENS if producer else 1
    if producer:
        found = _producer(plugins, scorer, where)
        if isinstance(found, SchedulerProblem) or found is None:
            if found is None and served and by_role:
                capacity = _capacity(by_role, served, PRODUCER_MIN_BLOCK_TOKENS)
                return _no_producer(where, capacity)
            return found
        index = found
    plugin = plugins[index]
    name = str(plugin.get("name"))
    at = f"{where} plugin {name}"
    params = plugin.get("parameters") or {}
    unknown = sorted(set(params) - KNOWN_PARAMETERS) if isinstance(params, Mapping) else []
    problem = None
    if not isinstance(params, Mapping):
        problem = "has parameters that are not a map"
    elif unknown:
        problem = f"has parameters kvtier does not know: {', '.join(unknown)}"
    elif "blockSize" in params and BLOCK_TOKENS not in params:
        problem = "sets only blockSize, a size in characters from older releases"
    else:
        problem = _loader_refusal(params) or _index_elsewhere(plugins, index, producer)
    if problem is not None:
        return SchedulerProblem(UNKNOWN_CONFIG_REASON, f"{at} {problem}; kvtier leaves it alone")
    block_tokens = params.get(BLOCK_TOKENS)
    block_tokens = DEFAULT_BLOCK_TOKENS if block_tokens is None else block_tokens
    if not _whole(block_tokens) or block_tokens < 1:
        why = (
            f" (with {AUTO_TUNE} false, which kvtier sets, the endpoint picker's config loader "
            "refuses one below 1)"
            if _whole(block_tokens)
            else ""
        )
        return SchedulerProblem(
            UNKNOWN_CONFIG_REASON,
            f"{at}: {BLOCK_TOKENS} {block_tokens!r} is not a block size{why}; kvtier leaves "
            "it alone",
        )
    if not served or not by_role:
        return None  # declared but in no scheduling profile: not enabled
    block_tokens = max(block_tokens, floor)
    capacity = _capacity(by_role, served, block_tokens)
    user = {key: _user_value(params.get(key), own.get(key)) for key in (CAPACITY, AUTO_TUNE)}
    new_params = {**params, CAPACITY: capacity, AUTO_TUNE: False}
    new_plugins = copy.deepcopy(plugins)
    new_plugins[index] = {**plugin, "parameters": new_params}
    saved = {
        "plugin": name,
        # Whether the user's plugin had a parameters map at all (kvtier's record says once it
        # has written one).
        "parameters": own.get("parameters", "parameters" in plugin),
        **{k: {"base": user[k], "applied": new_params[k]} for k in (CAPACITY, AUTO_TUNE)},
    }
    return SchedulerSync(name, block_tokens, capacity, tuple(served), new_plugins, saved)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _loader_refusal(params: Mapping[str, Any]) -> str | None:
    """Why the endpoint picker's config loader would refuse the parameters kvtier keeps beside
    its two (hack/oracles/epp: gateway-api-inference-extension v1.4.0 and v1.5.0 decode them
    into whole numbers; v1.5.0 refuses a negative maxPrefixTokensToMatch); None when it loads
    them. blockSizeTokens is checked by the caller."""
    for key in ("blockSize", "maxPrefixBlocksToMatch", MAX_TOKENS):
        value = params.get(key)
        if value is not None and not _whole(value):
            return f"has {key} {value!r}, not a whole number, which the picker's loader refuses"
    if (params.get(MAX_TOKENS) or 0) < 0:
        return f"has {MAX_TOKENS} {params[MAX_TOKENS]}, below 0, which the picker's loader refuses"
    return None


def _index_elsewhere(plugins: Sequence[Any], index: int, producer: bool) -> str | None:
    """Why a scorer's own parameters would not size the picker's index. Before 0.9.0, llm-d
    inference scheduler v0.8.0 (gateway-api-inference-extension v1.5.0) keeps one index, which
    its loader creates from the parameters of the last prefix-cache-scorer, and none from them
    when the config declares an approx-prefix-cache-producer (which v0.7 does not know)."""
    if producer:
        return None
    types = [p.get("type") if isinstance(p, Mapping) else None for p in plugins]
    if PRODUCER_TYPE in types:
        return (
            f"sits beside an {PRODUCER_TYPE} plugin: a picker before 0.9.0 creates no index from "
            "the scorer's parameters then (gateway-api-inference-extension v1.5.0) or refuses "
            "the producer (v1.4.0)"
        )
    later = [
        plugins[i].get("name") for i in range(index + 1, len(plugins)) if types[i] == SCORER_TYPE
    ]
    if later:
        return (
            f"is followed by {SCORER_TYPE} {later[-1]}: the picker's loader sizes its one index by "
            f"the last {SCORER_TYPE}'s parameters (gateway-api-inference-extension v1.5.0); list "
            f"{CPU_SCORER} last"
        )
    return None


def _named(plugins: Sequence[Any], name: str) -> int | None:
    return next(
        (i for i, p in enumerate(plugins) if isinstance(p, Mapping) and p.get("name") == name),
        None,
    )


def _capacity(by_role: Mapping[str, RoleOffload], served: Sequence[str], block_tokens: int) -> int:
    """One index size serves every endpoint the scorer picks from: the smallest CPU tier
    among them, so the index never promises blocks an endpoint cannot hold (at least 1)."""
    return max(
        1,
        min(
            blocks(by_role[r].endpoint_cpu_bytes, by_role[r].bytes_per_token, block_tokens)
            for r in served
        ),
    )


def _producer(
    plugins: Sequence[Any], scorer: Mapping[str, Any], where: str
) -> int | SchedulerProblem | None:
    """The index of the producer plugin the CPU scorer names; None when it names none."""
    params = scorer.get("parameters") or {}
    name = params.get(PRODUCER_NAME) if isinstance(params, Mapping) else None
    if not name:
        return None
    index = _named(plugins, str(name))
    plugin = plugins[index] if index is not None else {}
    if plugin.get("type") != PRODUCER_TYPE:
        return SchedulerProblem(
            UNKNOWN_CONFIG_REASON,
            f"{where} plugin {CPU_SCORER} reads {PRODUCER_NAME} {name}, which is not an "
            f"{PRODUCER_TYPE} plugin of the config; kvtier leaves it alone",
        )
    return index


def _no_producer(where: str, capacity: int) -> SchedulerProblem:
    return SchedulerProblem(
        DROPPED_REASON,
        f"{where} plugin {CPU_SCORER} names no {PRODUCER_NAME}: the endpoint picker (0.9.0 or "
        f"later, spec.router.scheduler.annotations {VERSION_ANNOTATION}; KServe's preset sets "
        f"{KSERVE_PICKER_VERSION}) keeps the index in an {PRODUCER_TYPE} plugin, and KServe "
        f"v0.20 removes the scorer's other parameters; declare a producer for the CPU tier, "
        f"name it in the scorer's {PRODUCER_NAME}, and kvtier sets its {AUTO_TUNE}: false and "
        f"{CAPACITY}: {capacity} (blocks of {PRODUCER_MIN_BLOCK_TOKENS} tokens, the producer's "
        "floor)",
    )


def restored_plugins(target: Mapping[str, Any], saved: Mapping[str, Any]) -> list[Any] | None:
    """The target's inline plugins list with the user's values back where it still holds
    kvtier's; None when there is nothing to give back."""
    plugins = at_path(target, PLUGINS_PATH)
    return restore_plugins(plugins, saved) if isinstance(plugins, list) else None


def restore_plugins(plugins: Sequence[Any], saved: Mapping[str, Any]) -> list[Any] | None:
    """A plugins list with the user's values back where it still holds kvtier's; None when
    there is nothing to give back."""
    name = saved.get("plugin")
    out = copy.deepcopy(list(plugins))
    changed = False
    for plugin in out:
        if not isinstance(plugin, dict) or plugin.get("name") != name:
            continue
        params = plugin.get("parameters")
        if not isinstance(params, dict):
            continue
        for key in (CAPACITY, AUTO_TUNE):
            entry = saved.get(key)
            if not isinstance(entry, Mapping) or key not in params:
                continue
            if params[key] != entry.get("applied"):
                continue  # changed since: the user's now
            changed = True
            if entry.get("base") is None:
                del params[key]
            else:
                params[key] = entry["base"]
        if not params and not saved.get("parameters", True):
            del plugin["parameters"]
    # Values kvtier set to what the user had already are no change to give back.
    return out if changed and out != list(plugins) else None


def blocks(cpu_bytes: int, bytes_per_token: int, block_tokens: int) -> int:
    """Whole blocks of `block_tokens` tokens in a CPU tier (0 when the size is unknown)."""
    return cpu_bytes // (block_tokens * bytes_per_token) if bytes_per_token > 0 else 0
