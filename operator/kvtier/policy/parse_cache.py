"""A tier's spec and the policy, parsed and merged into effective settings once per content."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierSpec
from kvtier.settings import EffectiveSettings, effective_settings


@dataclass(frozen=True)
class Parsed:
    """A tier spec and the policy, parsed and merged into the settings the tier runs with."""

    spec: KVCacheTierSpec
    policy: KVCachePolicySpec | None
    policy_error: str | None  # the first validation message of an invalid policy
    settings: EffectiveSettings
    effective: tuple[Mapping[str, str], ...]  # status.effective rows


def _fingerprint(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


# A spec changes far less often than its tier is decided (twice per Apply reconcile, once
# more per watch event of its target or owned objects): parsed and merged once per content.
_PARSED: dict[tuple[str, str | None], Parsed] = {}
PARSED_KEPT = 2048


def parse(spec_body: Mapping[str, Any], policy_body: Mapping[str, Any] | None) -> Parsed:
    key = (_fingerprint(spec_body), None if policy_body is None else _fingerprint(policy_body))
    hit = _PARSED.get(key)
    if hit is None:
        hit = _parse_new(spec_body, policy_body)
        if len(_PARSED) >= PARSED_KEPT:
            del _PARSED[next(iter(_PARSED))]  # the oldest
        _PARSED[key] = hit
    return hit


def _parse_new(spec_body: Mapping[str, Any], policy_body: Mapping[str, Any] | None) -> Parsed:
    spec = KVCacheTierSpec.model_validate(spec_body)
    policy: KVCachePolicySpec | None = None
    error: str | None = None
    if policy_body is not None:
        try:
            policy = KVCachePolicySpec.model_validate(policy_body)
        except ValidationError as exc:
            error = exc.errors()[0]["msg"]
    eff = effective_settings(spec, policy)
    return Parsed(spec, policy, error, eff, tuple(e.to_k8s() for e in eff.entries()))
