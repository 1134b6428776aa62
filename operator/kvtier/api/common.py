"""Building blocks shared by the CR models: base model, names, quantities, conditions, CEL."""

from __future__ import annotations

import functools
import re
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

from kubernetes.utils import parse_quantity
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

from kvtier.sizing.errors import SizingError
from kvtier.sizing.releases import RELEASES, VERSION_PATTERN, vllm_release

# Kubernetes name grammars. Patterns reject path tricks such as "../x" or "a/b" outright.
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIGMAP_KEY = r"^[-._a-zA-Z0-9]+$"

DnsLabel = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
DnsSubdomain = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)
]
# Free text written by the operator; bounded so CEL cost estimates stay finite.
ShortText = Annotated[str, StringConstraints(max_length=256)]
LongText = Annotated[str, StringConstraints(max_length=32768)]

# The Kubernetes resource.Quantity grammar (apimachinery); parse_quantity alone is more lenient
# (it accepts surrounding spaces), and the CLI must reject what the API server rejects.
_QUANTITY_RE = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))?$"
)
QUANTITY_MAX_LENGTH = 64
AUTO = "auto"


def timestamp(now: datetime) -> str:
    """A Kubernetes metav1.Time, as conditions and events carry it."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def cel(
    rule: str, message: str, *, field_path: str | None = None, reason: str | None = None
) -> dict[str, str]:
    """One `x-kubernetes-validations` entry; fieldPath/reason make the API server's error point
    at the offending child field instead of the object holding the rule."""
    entry = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """`json_schema_extra` payload carrying CEL rules for a model or a field."""
    return {"x-kubernetes-validations": list(rules)}


def _known_vllm_version(value: str) -> str:
    try:
        vllm_release(value)
    except SizingError as exc:
        raise ValueError(exc.message) from None
    return value


# A vLLM release: any patch of a series kvtier has checked against vLLM's own code.
VLLMVersion = Annotated[
    str,
    StringConstraints(max_length=64, pattern=VERSION_PATTERN),
    AfterValidator(_known_vllm_version),
]
_SERIES = "|".join(s.replace(".", "[.]") for s in RELEASES)


def vllm_version_rules(path: str) -> dict[str, Any]:
    """Admission's check of a vLLM version field: a release kvtier knows, named in the error."""
    return validations(
        cel(
            f"self.matches('^v?({_SERIES})([.][0-9]+)?([.+-].*)?$')",
            f"{path} must be a vLLM release kvtier has checked: "
            + ", ".join(f"{s}.x" for s in RELEASES),
        )
    )


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True is not the quantity 1
def quantity_value(value: int | str) -> Decimal:
    """The numeric value of a Kubernetes quantity (bytes for memory and storage). Memoized:
    every decision parses the same few node and target quantities again."""
    if isinstance(value, bool):
        raise ValueError("a quantity must be an integer or a string such as 64Gi")
    if isinstance(value, str) and not _QUANTITY_RE.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 64Gi, 10Ti, 500M)")
    # The kubernetes client ships no type hints.
    return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]


def quantity_bytes(value: int | str) -> int:
    """A quantity as whole bytes, rounded up so a tier is never smaller than asked."""
    return int(quantity_value(value).to_integral_value(rounding="ROUND_CEILING"))


def _positive_quantity(value: Any) -> Any:
    if quantity_value(value) <= 0:
        raise ValueError("must be a positive quantity")
    return value


def _non_negative_quantity(value: Any) -> Any:
    if quantity_value(value) < 0:
        raise ValueError("must not be negative")
    return value


def _auto_or_positive_quantity(value: Any) -> Any:
    return value if value == AUTO else _positive_quantity(value)


# The int-or-string shape Kubernetes uses for resource.Quantity. CEL rules naming the field are
# attached per field (see quantity_rules) because the message must say which field is wrong.
_INT_OR_STRING: dict[str, Any] = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "maxLength": QUANTITY_MAX_LENGTH,
}

PositiveQuantity = Annotated[
    int | str, BeforeValidator(_positive_quantity), WithJsonSchema(_INT_OR_STRING)
]
NonNegativeQuantity = Annotated[
    int | str, BeforeValidator(_non_negative_quantity), WithJsonSchema(_INT_OR_STRING)
]
AutoOrQuantity = Annotated[
    int | str, BeforeValidator(_auto_or_positive_quantity), WithJsonSchema(_INT_OR_STRING)
]

# An int-or-string value is `dyn` in CEL: branch on its type before calling quantity().
_POSITIVE = "(isQuantity(self) && quantity(self).isGreaterThan(quantity('0')))"
_NON_NEGATIVE = "(isQuantity(self) && !quantity(self).isLessThan(quantity('0')))"


def quantity_rules(
    path: str, *, allow_auto: bool = False, allow_zero: bool = False
) -> dict[str, Any]:
    """CEL rule for a quantity field; `path` is the field's full path used in the message."""
    if allow_auto:
        rule = f"type(self) == int ? self > 0 : (self == '{AUTO}' || {_POSITIVE})"
        message = f"{path} must be 'auto' or a positive quantity such as 64Gi"
    elif allow_zero:
        rule = f"type(self) == int ? self >= 0 : {_NON_NEGATIVE}"
        message = f"{path} must be a non-negative quantity such as 4Gi"
    else:
        rule = f"type(self) == int ? self > 0 : {_POSITIVE}"
        message = f"{path} must be a positive quantity such as 10Ti"
    return validations(cel(rule, message))


class KubeModel(BaseModel):
    """Base of every CR model: camelCase on the wire, snake_case in Python, unknown fields are
    errors (the API server would prune them silently; the CLI should say so)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
    )

    def to_k8s(self) -> dict[str, Any]:
        """The JSON-ready camelCase dict that goes into a Kubernetes object."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """metav1.Condition: the observed state of one aspect of the object."""

    type: Annotated[
        str,
        StringConstraints(
            max_length=316,
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ] = Field(description="Type of condition in CamelCase, e.g. Ready.")
    status: ConditionStatus = Field(description="Status of the condition: True, False, Unknown.")
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation the condition was set from.",
    )
    last_transition_time: datetime = Field(
        description="Last time the condition changed from one status to another."
    )
    reason: Annotated[
        str,
        StringConstraints(
            min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
        ),
    ] = Field(description="Programmatic identifier of the last transition, in CamelCase.")
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        description="Human-readable details of the last transition."
    )


def list_map(*keys: str) -> dict[str, Any]:
    """`json_schema_extra` making a list a map keyed by `keys`: the API server rejects duplicate
    keys and server-side apply merges entries instead of replacing the whole list."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}
