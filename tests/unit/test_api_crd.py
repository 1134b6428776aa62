"""The generated CRDs are structural and carry the validation users rely on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvtier.api.crd import DEFINITIONS, KVCACHEPOLICY, KVCACHETIER
from kvtier.generate import crd_documents

Node = dict[str, Any]
DOCUMENTS = crd_documents()  # as generated: the target kinds stamped in


def _schema(definition: Any) -> Node:
    version = DOCUMENTS[definition.kind]["spec"]["versions"][0]
    schema: Node = version["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: Node, path: str = "") -> Iterator[tuple[str, Node]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


ALL_NODES = [(f"{d.kind}{path}", node) for d in DEFINITIONS for path, node in _walk(_schema(d))]
IDS = [path for path, _ in ALL_NODES]


@pytest.mark.parametrize(("path", "node"), ALL_NODES, ids=IDS)
def test_every_node_is_structural(path: str, node: Node) -> None:
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    assert "type" in node or int_or_string or node.get("x-kubernetes-preserve-unknown-fields")
    assert not {"$ref", "$defs", "title", "default", "nullable", "oneOf", "allOf", "const"} & set(
        node
    )
    if "anyOf" in node:
        assert int_or_string, path
        assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    if node.get("type") == "object" and "properties" in node:
        assert "additionalProperties" not in node, path
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        assert node.get(bound, True) is True, path


@pytest.mark.parametrize(("path", "node"), ALL_NODES, ids=IDS)
def test_cel_cost_bounds(path: str, node: Node) -> None:
    """Unbounded strings or lists make the API server reject CEL rules on cost grounds."""
    # apiVersion and kind are the API server's own; no rule reads them.
    own = path.split(".", 1)[-1] not in {"apiVersion", "kind"}
    # The API server bounds enum and date-time strings itself.
    if own and node.get("type") == "string" and node.get("format") != "date-time":
        assert "maxLength" in node or "enum" in node, path
    if node.get("type") == "array":
        assert "maxItems" in node, path
    if node.get("type") == "object" and "additionalProperties" in node:
        assert "maxProperties" in node, path


@pytest.mark.parametrize(("path", "node"), ALL_NODES, ids=IDS)
def test_every_spec_field_is_described(path: str, node: Node) -> None:
    # Map values (`{}`) have no name of their own to explain.
    if (".spec." in path or path.endswith(".spec")) and not path.endswith("{}"):
        assert node.get("description"), f"{path} has no description for kubectl explain"


@pytest.mark.parametrize(("path", "node"), ALL_NODES, ids=IDS)
def test_cel_rules_have_messages_naming_a_field(path: str, node: Node) -> None:
    for rule in node.get("x-kubernetes-validations", []):
        assert rule["rule"] and rule["message"]
        assert "spec." in rule["message"] or "KVCachePolicy" in rule["message"], rule
        if "fieldPath" in rule:
            child = rule["fieldPath"].lstrip(".")
            assert child in node["properties"], (path, rule)


def _at(schema: Node, *names: str) -> Node:
    for name in names:
        schema = schema["properties"][name]
    return schema


def test_conditions_are_a_list_map_keyed_by_type() -> None:
    for definition in DEFINITIONS:
        conditions = _at(_schema(definition), "status", "conditions")
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert "type" in conditions["items"]["required"]


def test_tier_crd_names_scope_columns_and_status_subresource() -> None:
    document = DOCUMENTS[KVCACHETIER.kind]
    spec = document["spec"]
    assert document["metadata"]["name"] == "kvcachetiers.kvcache.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["kvt"]
    assert spec["names"]["categories"] == ["kvcache"]
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Target", "Topology", "CPU Tier", "Disk Tier", "Ready", "Reason", "Age"]
    assert _schema(KVCACHETIER)["required"] == ["spec"]


def test_policy_crd_is_cluster_scoped_singleton() -> None:
    spec = DOCUMENTS[KVCACHEPOLICY.kind]["spec"]
    assert spec["scope"] == "Cluster"
    root = _schema(KVCACHEPOLICY)
    assert root["x-kubernetes-validations"] == [
        {
            "rule": "self.metadata.name == 'cluster'",
            "message": "KVCachePolicy must be named 'cluster'",
        }
    ]
    pools = _at(root, "spec", "nvmePools")
    assert pools["x-kubernetes-list-map-keys"] == ["name"]


def test_quantities_are_int_or_string_with_quantity_cel() -> None:
    size = _at(_schema(KVCACHETIER), "spec", "cpu", "size")
    assert size["x-kubernetes-int-or-string"] is True
    (rule,) = size["x-kubernetes-validations"]
    assert "isQuantity(self)" in rule["rule"] and "'auto'" in rule["rule"]


def test_target_ref_namespace_is_declared_only_to_be_forbidden() -> None:
    target = _at(_schema(KVCACHETIER), "spec", "targetRef")
    (rule,) = [r for r in target["x-kubernetes-validations"] if r["fieldPath"] == ".namespace"]
    # `namespace` is a CEL reserved word: it must be escaped.
    assert rule["rule"] == "!has(self.__namespace__)"
    assert rule["reason"] == "FieldValueForbidden"


def test_tier_spec_has_no_host_paths() -> None:
    paths = [path for path, _ in _walk(_schema(KVCACHETIER))]
    assert not [p for p in paths if "path" in p.rsplit(".", 1)[-1].lower()]


def test_converter_refuses_non_structural_unions() -> None:
    from pydantic import BaseModel

    from kvtier.api.crd import SchemaError, structural_schema

    class Loose(BaseModel):
        value: int | str | None = None

    with pytest.raises(SchemaError, match="not structural"):
        structural_schema(Loose)
