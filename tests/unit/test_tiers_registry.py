"""The tier registry: one entry per tier type with unique names, an unregistered disk type
refused naming the known ones, the tables outside the registry (sizing's, the API's enums)
naming what it names, and tier modules that never import each other."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kvtier.api.tier import DiskType, Topology
from kvtier.render import RenderError
from kvtier.render.writes import render_writes
from kvtier.sizing import TOPOLOGIES, record
from kvtier.sizing.disk_types import DISK_FACTS
from kvtier.tiers import registry
from kvtier.tiers.registry import (
    CPU,
    DISK_TIERS,
    TIERS,
    available_disks,
    disk_tier,
    find_disk_tier,
    known_disk_types,
    status_name,
    tier_by_status_name,
)
from tests.unit.test_render_writes import NODES, GiB, _setup, _sizing, _yaml

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "kvtier"
KNOWN = "NVMe, CephFS, ObjectStore"


def test_every_tier_type_is_registered_once() -> None:
    assert (CPU, *DISK_TIERS) == TIERS
    for attribute in ("name", "status_name"):
        names = [getattr(t, attribute) for t in TIERS]
        assert len(set(names)) == len(names), attribute
    assert all(t.status_name == t.status_name.lower() for t in TIERS)
    assert CPU.vllm_type is None  # the connector's own tier
    assert all(t.vllm_type in ("fs", "obj") for t in DISK_TIERS)


def test_the_lookups_find_each_type_by_its_names() -> None:
    assert known_disk_types() == KNOWN
    assert disk_tier(None) is None and find_disk_tier(None) is None
    for tier in DISK_TIERS:
        assert disk_tier(tier.name) is tier is find_disk_tier(tier.name)
        assert status_name(tier.name) == tier.status_name
    for tier in TIERS:
        assert tier_by_status_name(tier.status_name) is tier
    assert [t.status_name for t in TIERS] == ["cpu", "nvme", "cephfs", "objectstore"]


@pytest.mark.parametrize("name", ["Lustre", "CPU", "nvme", "Auto", "None"])
def test_an_unregistered_disk_type_is_refused_naming_the_known_ones(name: str) -> None:
    with pytest.raises(RenderError) as refused:
        disk_tier(name)
    assert refused.value.reason == "DiskTypeNotSupported"
    assert refused.value.message == (f"{name} is not a disk tier type kvtier provisions ({KNOWN})")
    assert find_disk_tier(name) is None and status_name(name) is None


def test_render_writes_refuses_a_disk_type_no_module_provisions() -> None:
    ref, tier, settings = _setup("kvcachetier-llama70b-nvme.yaml")
    sizing = _sizing("llama-3.1-70b", 4, 50_000, 32, 1, cpu_bytes=256 * GiB, disk_type="NVMe")
    target = _yaml("targets/llama70b-isvc.yaml")
    with pytest.raises(RenderError) as refused:
        render_writes(
            ref, tier.spec, settings, record.replace(sizing, disk="Lustre"), target, [], 1
        )
    assert refused.value.reason == "DiskTypeNotSupported"
    assert refused.value.message.endswith(f"({KNOWN})")


def test_the_example_nvme_tier_is_offered_what_its_cluster_has() -> None:
    _, tier, settings = _setup("kvcachetier-llama70b-nvme.yaml")
    names = {str(n["metadata"]["name"]) for n in NODES}
    assert available_disks(tier.spec, settings, NODES, names) == {"NVMe", "CephFS"}
    assert available_disks(tier.spec, settings, NODES, set()) == {"CephFS"}


def test_sizing_knows_the_registered_disk_types_alike() -> None:
    """sizing sits below the registry and keeps its own table: the two agree."""
    assert [d.name for d in DISK_FACTS] == [t.name for t in DISK_TIERS]
    for facts, tier in zip(DISK_FACTS, DISK_TIERS, strict=True):
        assert (facts.vllm_type, facts.shared) == (tier.vllm_type, tier.shared), tier.name
        assert tier.status_name in facts.aliases, tier.name


def test_the_apis_enums_name_the_registered_types() -> None:
    """The CRD is a contract: its enums are written by hand in kvtier.api and must list
    exactly the registered types (a new type adds its member to both)."""
    assert [d.value for d in DiskType] == ["Auto", "None", *(t.name for t in DISK_TIERS)]
    assert [t.value for t in Topology] == list(TOPOLOGIES)
    assert list(TOPOLOGIES) == ["CPUOnly", *(f"CPUAnd{t.name}" for t in DISK_TIERS)]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _tier_modules() -> set[str]:
    return {type(t).__module__ for t in TIERS}


def test_tier_modules_never_import_each_other() -> None:
    modules = _tier_modules()
    assert len(modules) == len(TIERS)  # one module per tier type
    for module in sorted(modules):
        path = Path(str(sys.modules[module].__file__))
        assert path.parent == PACKAGE / "tiers", module
        others = sorted((modules - {module}) & _imports(path))
        assert not others, f"{module} imports {others}"


def test_the_registry_is_the_one_list() -> None:
    """Within tiers/, only the registry imports the tier modules; the target kinds and the
    render builders see the tiers through tiers.base alone."""
    modules = _tier_modules() | {"kvtier.tiers.registry"}
    for path in sorted((PACKAGE / "tiers").glob("*.py")):
        if path.stem in ("registry", *(m.rsplit(".", 1)[-1] for m in modules)):
            continue
        assert not modules & _imports(path), f"tiers/{path.name} imports a tier module"
    for layer in ("targets", "render"):
        for path in sorted((PACKAGE / layer).glob("*.py")):
            found = {m for m in _imports(path) if m.startswith("kvtier.tiers")}
            allowed = {"kvtier.tiers.base"} | (
                {"kvtier.tiers.registry"} if path.name == "writes.py" else set()
            )
            extra = {m for m in found if m.rsplit(".", 1)[0] not in allowed and m not in allowed}
            assert not extra, f"{layer}/{path.name} imports {sorted(extra)}"
    assert registry.TIERS is TIERS
