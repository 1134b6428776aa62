"""The KV cache's dtype: the one kvtier sizes for, the --kv-cache-dtype it passes itself, and
the target's facts without that flag."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvtier.api.tier import ValueSource
from kvtier.policy.refusals import sized_false
from kvtier.settings import EffectiveSettings
from kvtier.sizing import SizingError, resolve_kv_dtype
from kvtier.targets.facts import TargetFacts
from kvtier.targets.pod import own_kv_cache_dtype
from kvtier.targets.server_flags import ServerFlags


def users_flags(target: TargetFacts, obj: Mapping[str, Any]) -> TargetFacts:
    """The target's facts without the --kv-cache-dtype kvtier itself passes (its record says
    which): sizing follows the user's flags, and kvtier's own one is re-rendered each time."""
    own = own_kv_cache_dtype(obj)
    if own is None or target.server.kv_cache_dtype != own:
        return target
    return replace(target, server=replace(target.server, kv_cache_dtype=None))


def kv_cache_dtype_flag(eff: EffectiveSettings, flags: ServerFlags) -> str | None:
    """The --kv-cache-dtype kvtier passes: the tier's or the policy's dtype, when the target
    passes none (a target that passes another is refused by kv_cache_dtype_to_size)."""
    asked = eff.kv_cache_dtype
    if asked.source is ValueSource.DEFAULT or flags.kv_cache_dtype is not None:
        return None
    return None if asked.value.value == "auto" else asked.value.value


def kv_cache_dtype_to_size(eff: EffectiveSettings, flags: ServerFlags, model_dtype: str) -> str:
    """The dtype to size with: the target's --kv-cache-dtype, else the tier's or the policy's
    (which kvtier then passes); a target passing another than the one asked is refused (the
    tier would be sized for bytes vLLM never uses). Compared as vLLM resolves them: `auto` is
    the model's dtype, fp8_e4m3 is fp8."""
    asked = eff.kv_cache_dtype
    served = flags.kv_cache_dtype or "auto"
    wanted = asked.value.value

    def resolved(dtype: str) -> str:
        try:
            return resolve_kv_dtype(dtype, model_dtype)[0].split("_", 1)[0]
        except SizingError:
            return dtype  # an unknown name: sizing names the field and the rule

    if (
        asked.source is ValueSource.DEFAULT
        or wanted == "auto"
        or resolved(wanted) == resolved(served)
    ):
        return served
    if flags.kv_cache_dtype is None:
        return wanted  # kvtier passes --kv-cache-dtype itself (kv_cache_dtype_flag)
    where = (
        "spec.model.kvCacheDtype"
        if asked.source is ValueSource.TIER
        else "the KVCachePolicy's defaults.kvCacheDtype"
    )
    raise sized_false(
        "KVCacheDtypeMismatch",
        f"{where} is {wanted}, but the target passes --kv-cache-dtype {served}: make them "
        "the same, or drop the setting (kvtier then sizes for the target's)",
    )
