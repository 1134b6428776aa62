"""kvtier's CPU-tier figures against vLLM's own, from the golden files of `make conformance`.

tests/fixtures/vllm/<version>.json holds what vLLM's own classes computed (hack/conformance/
harness.py, run in a vLLM virtualenv by hack/conformance/run). These tests need no vLLM: they
recompute kvtier's figures for every case and compare.

Every figure must equal vLLM's: chunk bytes and chunk count exactly, the bytes of a context
within 1 %, for every case of every pinned release. What vLLM itself refuses, kvtier must
refuse too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier import sizing

GOLDEN_DIR = Path(__file__).parent.parent / "fixtures" / "vllm"
GOLDEN = sorted(GOLDEN_DIR.glob("*.json"))
CONTEXT_TOLERANCE = 0.01  # bytes for a context: within 1 % (the bar); chunks exact

Case = dict[str, Any]


# Rendered kv-transfer-configs whose tier manager this machine cannot finish building, by disk
# type, and the error that stops it. Not a kvtier defect: vLLM's obj tier starts a NIXL agent
# whose OBJ plugin links NVIDIA's libcuobjclient, which no package registry serves. vLLM's own
# ObjStoreConfig takes kvtier's store_config first (`storeConfigAccepted`, checked below).
ENVIRONMENT_MANAGER_FAILURES: dict[str, str] = {
    "ObjectStore": "NIXL_ERR_NOT_FOUND",  # createBackend('OBJ'): the plugin cannot load
}


# Model configs the harness cannot hand to vLLM, and why (not a kvtier defect).
KNOWN_MODEL_ERRORS: dict[str, str] = {
    "nemotron-ultra-253b": "custom code",  # DeciLM's configuration_decilm.py (trust_remote_code)
}


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def test_golden_files_exist() -> None:
    """Never pass vacuously: at least one pinned vLLM release must be recorded."""
    assert GOLDEN, (
        f"no golden files in {GOLDEN_DIR}: run `make conformance` (hack/conformance/run --write)"
    )


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_provenance(path: Path) -> None:
    doc = _load(path)
    provenance = doc["provenance"]
    assert provenance["vllm"] == path.stem
    assert provenance["command"].startswith("hack/conformance/run")
    assert provenance["date"]
    assert doc["cases"], "a golden file without cases"


def kvtier_figures(case: Case, version: str, cpu_bytes: int, contexts: list[int]) -> dict[str, Any]:
    """kvtier's own numbers for one vLLM case (the same sizing `kvtier plan` uses)."""
    sp = sizing.plan(
        sizing.SizingInput(
            geometry=sizing.lookup_model(case["model"]),
            average_context_tokens=max(contexts),
            tensor_parallel_size=case["tensorParallelSize"],
            kv_cache_dtype=case["kvCacheDtype"],
            block_tokens=case["offloadBlockSize"],
            gpu_block_tokens=case["gpuBlockSize"],
            hybrid_kv_cache_manager=case["hybridKVCacheManager"],
            vllm_version=version,
            cpu_bytes=cpu_bytes,
            disk_type="None",  # the cases are CPUOffloadingSpec's
        )
    )
    return {
        "chunkBytes": sp.sizing.block_bytes,
        "numChunks": sp.sizing.cpu_chunks,
        "contextBytes": {str(n): sp.layout.context_bytes(n) for n in contexts},
    }


def vllm_figures(case: Case) -> dict[str, Any]:
    offload = case["offload"]
    return {
        "chunkBytes": offload["kvBytesPerChunk"],
        "numChunks": offload["numChunks"],
        "contextBytes": case["contextBytes"],
    }


def differing_fields(kvtier: dict[str, Any], vllm: dict[str, Any]) -> set[str]:
    out = set()
    for field in ("chunkBytes", "numChunks"):
        if kvtier[field] != vllm[field]:
            out.add(field)
    for n, ours in kvtier["contextBytes"].items():
        theirs = vllm["contextBytes"][n]
        if theirs is None or abs(ours - theirs) > CONTEXT_TOLERANCE * theirs:
            out.add("contextBytes")
    return out


def _cases(doc: dict[str, Any]) -> list[Case]:
    """The cases vLLM computed (refused ones are checked by test_refusals_agree)."""
    return [c for c in doc["cases"] if "error" not in c]


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_no_unexpected_errors(path: Path) -> None:
    """Every case vLLM computed, and every model config vLLM took, unless listed."""
    doc = _load(path)
    problems = []
    for model in doc["models"]:
        if "error" in model:
            expected = KNOWN_MODEL_ERRORS.get(model["model"])
            if expected is None or expected not in model["error"]:
                problems.append(f"model {model['model']}: {model['error']}")
        elif model["model"] in KNOWN_MODEL_ERRORS:
            problems.append(f"model {model['model']}: builds now; drop it from KNOWN_MODEL_ERRORS")
    for case in doc["cases"]:
        if "error" not in case:
            continue
        if case["offloadBlockSize"] % case["gpuBlockSize"]:
            continue  # vLLM refuses it; test_refusals_agree checks that kvtier does too
        problems.append(f"{case['id']}: {case['error']}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_refusals_agree(path: Path) -> None:
    """An offload block that is not a multiple of the GPU block: vLLM and kvtier both refuse."""
    doc = _load(path)
    refused = [c for c in doc["cases"] if c["offloadBlockSize"] % c["gpuBlockSize"]]
    assert refused, "the golden file has no case with a non-multiple offload block"
    problems = []
    for case in refused:
        if "error" not in case:
            problems.append(f"{case['id']}: vLLM accepted it")
        try:
            sizing.SizingInput(
                geometry=sizing.lookup_model(case["model"]),
                average_context_tokens=50_000,
                block_tokens=case["offloadBlockSize"],
                gpu_block_tokens=case["gpuBlockSize"],
            )
        except sizing.SizingError:
            continue
        problems.append(f"{case['id']}: vLLM refuses it ({case.get('error')}), kvtier accepts it")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_figures_match_vllm(path: Path) -> None:
    """chunk bytes, chunk count and context bytes: kvtier equals vLLM in every case."""
    doc = _load(path)
    cpu_bytes = doc["settings"]["cpuBytesToUse"]
    contexts = doc["settings"]["contexts"]
    cases = _cases(doc)
    assert cases, "the golden file has no computed case"
    problems: list[str] = []
    for case in cases:
        ours = kvtier_figures(case, path.stem, cpu_bytes, contexts)
        theirs = vllm_figures(case)
        for field in sorted(differing_fields(ours, theirs)):
            problems.append(f"{case['id']}: {field} kvtier {ours[field]} != vLLM {theirs[field]}")
    assert not problems, "kvtier differs from vLLM:\n" + "\n".join(problems)


def test_cases_cover_the_version_dependent_layouts() -> None:
    """The golden files exercise what makes sizing version-dependent (else the test is weak)."""
    cases = [c for path in GOLDEN for c in _cases(_load(path))]
    assert any(
        c["hybridKVCacheManager"] and any(g["spec"] == "SlidingWindowSpec" for g in c["groups"])
        for c in cases
    ), "no sliding-window group under the hybrid manager"
    assert any(c["offload"].get("replicatedLayout") for c in cases), "no replicated MLA layout"
    assert any(
        c["offload"]["rawKVBytesPerChunk"] != c["offload"]["kvBytesPerChunk"] for c in cases
    ), "no chunk rounded up by vLLM's alignment"
    assert any(int(n) % c["offload"]["tokensPerChunk"] for c in cases for n in c["contextBytes"]), (
        "no context ending inside a chunk"
    )


def _rendered(entry: dict[str, Any], manager_cpu_bytes: int, version: str) -> dict[str, Any]:
    """What kvtier renders today for a manager entry (the harness's inputs, `<root>` paths)."""
    disk = entry["disk"]
    inp = sizing.SizingInput(
        geometry=sizing.lookup_model(entry["model"]),
        average_context_tokens=50_000,
        tensor_parallel_size=entry["tensorParallelSize"],
        cpu_bytes=manager_cpu_bytes,
        disk_type=disk,
        available_disk_types=frozenset({"NVMe", "CephFS", "ObjectStore"}),
        fs_root_dir=f"<root>/{disk.lower()}",
        object_store_bucket="kvtier-conformance",
        object_store_endpoint="http://127.0.0.1:9",
        vllm_version=version,
    )
    return sizing.plan(inp).kv_transfer_config


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_rendered_configs_build_a_tier_manager(path: Path) -> None:
    """Each kv-transfer-config kvtier renders built a manager in vLLM, unless listed.

    The golden file holds the JSON kvtier rendered when it was made: if kvtier renders
    something else today, the golden file no longer tests it (run `make conformance`).
    """
    doc = _load(path)
    assert doc["managers"], "no rendered configs in the golden file"
    problems = []
    for entry in doc["managers"]:
        label = f"{entry['model']}/tp{entry['tensorParallelSize']}/{entry['disk']}"
        today = _rendered(entry, doc["settings"]["managerCPUBytes"], path.stem)
        if today != entry["kvTransferConfig"]:
            problems.append(f"{label}: kvtier renders another config now; rerun make conformance")
        stop = ENVIRONMENT_MANAGER_FAILURES.get(entry["disk"])
        if entry["builds"] and stop is not None:
            problems.append(f"{label}: builds now; drop {entry['disk']} from the failures")
        elif not entry["builds"] and (stop is None or stop not in entry.get("error", "")):
            problems.append(f"{label}: vLLM refused it: {entry.get('error')}")
        if entry["disk"] == "ObjectStore" and not entry.get("storeConfigAccepted"):
            problems.append(f"{label}: vLLM's ObjStoreConfig refused the store_config: {entry}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_fixture_configs_size_like_their_catalog_entries(path: Path) -> None:
    """The cases size catalog models; a model whose config.json vLLM read (a fixture file) must
    give kvtier the same geometry through `kvtier plan --config`, layer kinds included."""
    root = Path(__file__).parent.parent.parent
    checked = 0
    for model in _load(path)["models"]:
        source = model.get("configSource", "")
        if not source.startswith("tests/fixtures/configs/"):
            continue  # derived configs carry the catalog's geometry by construction
        ours = sizing.geometry_from_hf_config(root / source)
        catalog = sizing.lookup_model(model["model"])
        fields = (
            "attention_layers",
            "kv_heads",
            "head_dim",
            "latent_attention",
            "sliding_layers",
            "sliding_window",
            "linear_attention_blocks",
        )
        assert {f: getattr(ours, f) for f in fields} == {f: getattr(catalog, f) for f in fields}, (
            source
        )
        checked += 1
    assert checked >= 5
