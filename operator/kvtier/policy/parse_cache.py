"""A tier's spec and the policy, parsed and merged into effective settings once per content."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import EffectiveValue, KVCacheTierSpec
from kvtier.settings import (
    EffectiveRow,
    EffectiveSettings,
    effective_settings,
    with_target_vllm_version,
)


@dataclass(frozen=True)
class Merged:
    """The policy and the settings a tier spec merges into with it: they do not depend on the
    spec's targetRef, so tiers alike but for their target share one."""

    policy: KVCachePolicySpec | None
    policy_error: str | None  # the first validation message of an invalid policy
    settings: EffectiveSettings
    effective: tuple[Mapping[str, str], ...]  # status.effective rows
    # The settings with a target image's vLLM version, and their rows, by that version.
    by_image: dict[str | None, tuple[EffectiveSettings, tuple[Mapping[str, str], ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )


@dataclass(frozen=True)
class Parsed:
    """A tier spec and the policy, parsed and merged into the settings the tier runs with."""

    spec: KVCacheTierSpec
    merged: Merged

    @property
    def policy(self) -> KVCachePolicySpec | None:
        return self.merged.policy

    @property
    def policy_error(self) -> str | None:
        return self.merged.policy_error

    @property
    def settings(self) -> EffectiveSettings:
        return self.merged.settings

    @property
    def effective(self) -> tuple[Mapping[str, str], ...]:
        return self.merged.effective

    def for_image_version(
        self, image_version: str | None
    ) -> tuple[EffectiveSettings, tuple[Mapping[str, str], ...]]:
        """The settings as a target whose image names `image_version` makes them
        (settings.with_target_vllm_version) and their status.effective rows; `settings`
        itself when the version changes nothing. Worked out once per version."""
        merged = self.merged
        hit = merged.by_image.get(image_version)
        if hit is None:
            eff = with_target_vllm_version(merged.settings, image_version)
            rows = merged.effective if eff is merged.settings else _rows(eff)
            hit = merged.by_image[image_version] = (eff, rows)
        return hit


def _fingerprint(spec: Mapping[str, Any]) -> str | bytes:
    try:
        return orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # beyond what orjson writes (an integer past 64 bits)
        return json.dumps(spec, sort_keys=True, separators=(",", ":"))


# A spec changes far less often than its tier is decided (twice per Apply reconcile, once
# more per watch event of its target or owned objects): parsed once per content, and merged
# with the policy once per content but its targetRef.
_PARSED: dict[tuple[str | bytes, str | bytes | None], Parsed] = {}
PARSED_KEPT = 2048
_MERGED: dict[tuple[str | bytes, str | bytes | None], Merged] = {}
MERGED_KEPT = 256


# The policy, parsed once per content for every tier (not once per tier), and the status.effective
# rows, one object per distinct row (the same few recur in every tier's settings).
_POLICIES: dict[str | bytes, tuple[KVCachePolicySpec | None, str | None]] = {}
POLICIES_KEPT = 8
_ROWS: dict[EffectiveRow, Mapping[str, str]] = {}
ROWS_KEPT = 4096


def parse(spec_body: Mapping[str, Any], policy_body: Mapping[str, Any] | None) -> Parsed:
    policy_key = None if policy_body is None else _fingerprint(policy_body)
    key = (_fingerprint(spec_body), policy_key)
    hit = _PARSED.get(key)
    if hit is None:
        spec = KVCacheTierSpec.model_validate(spec_body)
        hit = Parsed(spec, _merged(spec_body, spec, policy_body, policy_key))
        _keep(_PARSED, key, hit, PARSED_KEPT)
    return hit


def _merged(
    spec_body: Mapping[str, Any],
    spec: KVCacheTierSpec,
    policy_body: Mapping[str, Any] | None,
    policy_key: str | bytes | None,
) -> Merged:
    key = (_fingerprint({k: v for k, v in spec_body.items() if k != "targetRef"}), policy_key)
    hit = _MERGED.get(key)
    if hit is None:
        policy, error = _parse_policy(policy_body, policy_key)
        eff = effective_settings(spec, policy)
        hit = Merged(policy, error, eff, _rows(eff))
        _keep(_MERGED, key, hit, MERGED_KEPT)
    return hit


def _keep(memo: dict[Any, Any], key: Any, value: Any, kept: int) -> None:
    if len(memo) >= kept:
        del memo[next(iter(memo))]  # the oldest
    memo[key] = value


def _rows(eff: EffectiveSettings) -> tuple[Mapping[str, str], ...]:
    """status.effective rows of the settings, equal rows one object (see _ROWS)."""
    if len(_ROWS) > ROWS_KEPT:
        _ROWS.clear()
    rows = []
    for entry in eff.entries():
        row = _ROWS.get(entry)
        if row is None:
            value = EffectiveValue(field=entry.field, value=entry.value, source=entry.source)
            row = _ROWS[entry] = value.to_k8s()
        rows.append(row)
    return tuple(rows)


def _parse_policy(
    body: Mapping[str, Any] | None, key: str | bytes | None
) -> tuple[KVCachePolicySpec | None, str | None]:
    """The policy spec (None, with the first validation message, when it is invalid)."""
    if body is None or key is None:
        return None, None
    hit = _POLICIES.get(key)
    if hit is None:
        try:
            hit = (KVCachePolicySpec.model_validate(body), None)
        except ValidationError as exc:
            hit = (None, exc.errors()[0]["msg"])
        _keep(_POLICIES, key, hit, POLICIES_KEPT)
    return hit
