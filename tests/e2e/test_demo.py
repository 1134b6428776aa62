"""`make demo`'s main job (hack/demo.py's run) on a control plane of its own: it must end
with every tier Ready and exit 0, and its wait must name a tier that is not Ready."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from localcluster import LocalCluster
from tests.e2e.conftest import own_cluster
from tests.e2e.kube_helpers import eventually
from tests.e2e.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[2]


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kvtier_demo", REPO / "hack" / "demo.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_cluster() -> Iterator[LocalCluster]:
    with own_cluster("demo") as cluster:
        yield cluster


def test_demo_ends_with_every_tier_ready(
    demo_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = load_demo()
    scratch = Path(tempfile.mkdtemp(prefix="kvtier-demo-fio-"))
    operator = OperatorProcess(demo_cluster, tmp_path / "operator.log")
    try:
        assert demo.run(demo_cluster, operator, scratch) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert "== Every tier is Ready ==" in out
        assert demo.not_ready(demo_cluster) == {}
        tiers = {"nemotron", "llama70b", "gpt-oss"}
        assert all(f"KVCacheTier {name}" in out for name in tiers)

        # The control: a tier that loses its model server is named by the same wait.
        demo_cluster.kubectl(
            "delete", "inferenceservice", "-n", demo.NAMESPACE, "llama-3-1-70b", "--wait=true"
        )
        # The operator's watch and kubectl race to see the deletion: once the tier says so,
        # the demo's wait must name it.
        eventually(lambda: "llama70b" in demo.not_ready(demo_cluster), 30, "llama70b not Ready")
        pending = demo.wait_ready(demo_cluster, timeout=5)
        assert set(pending) == {"llama70b"}, pending
        assert pending["llama70b"].startswith("TargetNotFound"), pending
    finally:
        operator.stop()
        shutil.rmtree(scratch, ignore_errors=True)
