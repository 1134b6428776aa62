"""Pydantic model -> structural OpenAPI v3 schema -> CustomResourceDefinition document.

Kubernetes wants a structural schema: every node typed, no $ref, no anyOf of differing types
except the int-or-string idiom, no `nullable` tricks. Pydantic emits JSON Schema 2020-12, so
this module inlines $defs, turns Optional (anyOf with null) into a plain optional property,
drops titles, and rewrites numeric exclusive bounds into the OpenAPI 3.0 boolean form.
Defaults are dropped on purpose: the API server must not fill them in, or status could not say
whether a value came from the built-in default, the KVCachePolicy or the KVCacheTier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from kvtier.api.policy import KVCachePolicy, KVCachePolicySpec, KVCachePolicyStatus
from kvtier.api.tier import (
    KVCacheTier,
    KVCacheTierSpec,
    KVCacheTierStatus,
    TargetKinds,
    target_ref_schema,
)
from kvtier.names import GROUP, VERSION

CATEGORY = "kvcache"

# JSON Schema keys with no place in a CRD schema.
_DROPPED = frozenset({"title", "default", "$schema"})


class SchemaError(ValueError):
    """The model uses a construct a structural schema cannot express."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a $ref; keys next to it (the field's description, CEL rules) win over the target's."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target = defs[ref.rsplit("/", 1)[-1]]
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    return _merge(_resolve(target, defs), siblings)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = {**base, **override}
    # CEL rules may sit on both the type and the field using it: keep both sets.
    rules = base.get("x-kubernetes-validations", []) + override.get("x-kubernetes-validations", [])
    if rules:
        merged["x-kubernetes-validations"] = rules
    return merged


def _strip_null(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`X | None` becomes X: optional means "not in required", never `null` on the wire."""
    variants = node.get("anyOf")
    if variants is None or node.get("x-kubernetes-int-or-string"):
        return node
    kept = [v for v in variants if v.get("type") != "null"]
    if len(kept) != 1:
        raise SchemaError(f"anyOf with several non-null types is not structural: {variants}")
    siblings = {k: v for k, v in node.items() if k != "anyOf"}
    return _merge(_resolve(kept[0], defs), siblings)


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _strip_null(_resolve(node, defs), defs)
    if "oneOf" in node or "allOf" in node or "const" in node:
        raise SchemaError(f"unsupported JSON Schema construct: {sorted(node)}")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _convert(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs)
        elif key == "additionalProperties":
            # `false` comes from extra="forbid": the API server prunes unknown fields anyway,
            # and a structural schema may not combine properties with additionalProperties.
            if isinstance(value, dict):
                out[key] = _convert(value, defs)
        elif key == "propertyNames":
            # Map keys are validated by the models only; CRDs cannot constrain them.
            continue
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        else:
            out[key] = value
    if "type" not in out and not (
        out.get("x-kubernetes-int-or-string") or out.get("x-kubernetes-preserve-unknown-fields")
    ):
        raise SchemaError(f"schema node without a type: {node}")
    return out


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model (camelCase field names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs)


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "jsonPath": self.json_path, "type": self.type}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class CRDDefinition:
    """Everything a CustomResourceDefinition needs beyond the models."""

    kind: str
    plural: str
    scope: str
    description: str
    object_model: type[BaseModel]
    spec_model: type[BaseModel]
    status_model: type[BaseModel]
    short_names: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    spec_required: bool = True
    # Where TargetRef schemas sit under the root, which the target kinds are stamped into.
    target_refs: tuple[tuple[str, ...], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def file_name(self) -> str:
        return f"{GROUP}_{self.plural}.yaml"


def _root_validations(model: type[BaseModel]) -> list[dict[str, str]]:
    """CEL rules declared on the whole-object model (they may read metadata.name)."""
    extra = model.model_config.get("json_schema_extra")
    if not isinstance(extra, dict):
        return []
    rules: list[dict[str, str]] = extra.get("x-kubernetes-validations", [])  # type: ignore[assignment]
    return list(rules)


def _stamp(node: dict[str, Any], path: tuple[str, ...], kinds: TargetKinds) -> dict[str, Any]:
    if not path:
        return target_ref_schema(node, kinds)
    properties = node["properties"]
    return {
        **node,
        "properties": {**properties, path[0]: _stamp(properties[path[0]], path[1:], kinds)},
    }


def _root_schema(definition: CRDDefinition, target_kinds: TargetKinds | None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "description": definition.description,
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "Versioned schema of this representation of an object.",
            },
            "kind": {"type": "string", "description": "REST resource this object represents."},
            # A CRD may not constrain metadata beyond name/generateName; the API server owns it.
            "metadata": {"type": "object"},
            "spec": structural_schema(definition.spec_model),
            "status": structural_schema(definition.status_model),
        },
    }
    if definition.spec_required:
        schema["required"] = ["spec"]
    rules = _root_validations(definition.object_model)
    if rules:
        schema["x-kubernetes-validations"] = rules
    if target_kinds is not None:
        for path in definition.target_refs:
            schema = _stamp(schema, path, target_kinds)
    return schema


def crd_document(
    definition: CRDDefinition, target_kinds: TargetKinds | None = None
) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition for one kind. `target_kinds`: the
    kinds a TargetRef may name, with their apiVersions (the target registry's, which kvtier's
    generator passes; the models alone leave any kind of the right shape)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": definition.name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": definition.kind,
                "listKind": f"{definition.kind}List",
                "plural": definition.plural,
                "singular": definition.kind.lower(),
                "shortNames": list(definition.short_names),
                "categories": [CATEGORY],
            },
            "scope": definition.scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _root_schema(definition, target_kinds)},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [c.to_dict() for c in definition.printer_columns],
                }
            ],
        },
    }


_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")

KVCACHETIER = CRDDefinition(
    kind="KVCacheTier",
    plural="kvcachetiers",
    scope="Namespaced",
    description="KV-cache offload tiers (CPU memory plus NVMe, CephFS or object store) for one "
    "vLLM / llm-d model server, sized from the model and the workload.",
    object_model=KVCacheTier,
    spec_model=KVCacheTierSpec,
    status_model=KVCacheTierStatus,
    short_names=("kvt",),
    target_refs=(("spec", "targetRef"),),
    printer_columns=(
        PrinterColumn("Target", ".spec.targetRef.name", description="The model server."),
        PrinterColumn("Topology", ".status.sizing.topology", description="Chosen tiers."),
        PrinterColumn("CPU Tier", ".status.cpuTier", description="CPU tier size."),
        PrinterColumn("Disk Tier", ".status.diskTier", description="Disk tier."),
        PrinterColumn("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        PrinterColumn(
            "Reason",
            '.status.conditions[?(@.type=="Ready")].reason',
            description="Why the tier is (not) Ready.",
        ),
        PrinterColumn(
            "Mode", ".status.mode", description="Mode in force (spec or policy).", priority=1
        ),
        PrinterColumn("Kind", ".spec.targetRef.kind", priority=1),
        PrinterColumn(
            "Effective",
            '.status.conditions[?(@.type=="TierEffective")].status',
            description="Whether the tiers pay off by vLLM's metrics.",
            priority=1,
        ),
        PrinterColumn(
            "Hit Ratio",
            ".status.observed.externalHitRatio",
            type="number",
            description="External prefix-cache hit ratio over the window.",
            priority=1,
        ),
        PrinterColumn(
            "Load/Block",
            ".status.observed.loadSecondsPerBlock",
            type="number",
            description="Mean seconds to load one offload block.",
            priority=1,
        ),
        PrinterColumn(
            "Disk Pressure",
            '.status.conditions[?(@.type=="DiskPressure")].status',
            description="Whether the disk tier stays above its high watermark.",
            priority=1,
        ),
        _AGE,
    ),
)

KVCACHEPOLICY = CRDDefinition(
    kind="KVCachePolicy",
    plural="kvcachepolicies",
    scope="Cluster",
    description="Cluster-wide defaults and guardrails for KVCacheTiers; a singleton named "
    "'cluster', owned by the platform team.",
    object_model=KVCachePolicy,
    spec_model=KVCachePolicySpec,
    status_model=KVCachePolicyStatus,
    short_names=("kvcp",),
    printer_columns=(
        PrinterColumn("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        PrinterColumn(
            "Reason",
            '.status.conditions[?(@.type=="Ready")].reason',
            description="Why the policy is (not) Ready.",
        ),
        PrinterColumn("Default Mode", ".spec.defaults.mode"),
        PrinterColumn("Object Store", ".spec.objectStore.allowed", type="boolean", priority=1),
        _AGE,
    ),
    spec_required=False,
)

DEFINITIONS = (KVCACHETIER, KVCACHEPOLICY)
