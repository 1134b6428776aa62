"""kvtier's CPU-tier figures against vLLM's own, from the golden files of `make conformance`.

tests/fixtures/vllm/<version>.json holds what vLLM's own classes computed (hack/conformance/
harness.py, run in a vLLM virtualenv by hack/conformance/run). These tests need no vLLM: they
recompute kvtier's figures for every case and compare.

Every figure must equal vLLM's exactly (chunk bytes, chunk count, the bytes of a context) for
every case of every pinned release. What vLLM itself refuses, kvtier must refuse too. That each
golden file is what the harness wrote from today's sources is test_golden_provenance.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier import sizing

REPO = Path(__file__).parent.parent.parent
GOLDEN_DIR = REPO / "tests" / "fixtures" / "vllm"
GOLDEN = sorted(GOLDEN_DIR.glob("*.json"))

Case = dict[str, Any]


# Rendered kv-transfer-configs whose tier manager this machine cannot finish building, by disk
# type, and the error that stops it. Not a kvtier defect: vLLM's obj tier starts a NIXL agent
# whose OBJ plugin links NVIDIA's libcuobjclient, which no package registry serves. vLLM's own
# ObjStoreConfig takes kvtier's store_config first (`storeConfigAccepted`, checked below).
ENVIRONMENT_MANAGER_FAILURES: dict[str, str] = {
    "ObjectStore": "NIXL_ERR_NOT_FOUND",  # createBackend('OBJ'): the plugin cannot load
}

NEMOTRON = "nemotron-ultra-253b"  # the study's model, sized by vLLM's own nemotron_nas.py


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def test_golden_files_exist() -> None:
    """Never pass vacuously: at least one pinned vLLM release is recorded, each with cases."""
    assert GOLDEN, (
        f"no golden files in {GOLDEN_DIR}: run `make conformance` (hack/conformance/run --write)"
    )
    assert all(_load(path)["cases"] for path in GOLDEN), "a golden file without cases"


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
    if kvtier["contextBytes"] != vllm["contextBytes"]:
        out.add("contextBytes")
    return out


def _cases(doc: dict[str, Any]) -> list[Case]:
    """The cases vLLM computed (refused ones are checked by test_refusals_agree)."""
    return [c for c in doc["cases"] if "error" not in c]


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_no_unexpected_errors(path: Path) -> None:
    """Every model config vLLM took, and every case it computed (but the refused blocks)."""
    doc = _load(path)
    problems = [f"model {m['model']}: {m['error']}" for m in doc["models"] if "error" in m]
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
    checked = 0
    for model in _load(path)["models"]:
        source = model.get("configSource", "")
        if not source.startswith("tests/fixtures/configs/"):
            continue  # derived configs carry the catalog's geometry by construction
        ours = sizing.geometry_from_hf_config(REPO / source)
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


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_catalog_nemotron_equals_what_vllms_model_code_built(path: Path) -> None:
    """Nemotron-Ultra's catalog entry is what vLLM's nemotron_nas.py built from its config.json.

    The harness constructs vLLM's DeciLMForCausalLM (on the meta device) and asks each attention
    layer it made for its KV cache spec: the layers, their KV heads and head size must be the
    catalog's, and the layers must be exactly the config's blocks whose attention is not a
    no-op (the ones kvtier's config.json reader counts). vLLM built every other block without
    attention, so none is a replace_with_linear block either.
    """
    record = next(m for m in _load(path)["models"] if m["model"] == NEMOTRON)
    assert "error" not in record, record
    built = record["vllmModel"]
    catalog = sizing.lookup_model(NEMOTRON)
    assert {
        "attentionLayers": catalog.attention_layers,
        "totalLayers": catalog.total_layers,
        "kvHeads": [catalog.kv_heads],
        "headSize": [catalog.head_dim],
        "maxPositionEmbeddings": catalog.max_position_embeddings,
        "specs": ["FullAttentionSpec"],
    } == {k: v for k, v in built.items() if k != "attentionLayerIndices"}
    assert catalog.linear_attention_blocks == 0 and not catalog.sliding_layers
    config = json.loads((REPO / record["configSource"]).read_text(encoding="utf-8"))
    holds_kv = [i for i, b in enumerate(config["block_configs"]) if not b["attention"]["no_op"]]
    assert built["attentionLayerIndices"] == holds_kv


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_nemotron_is_sized_by_vllm_in_every_setting(path: Path) -> None:
    """The study's model has a computed case for every TP, dtype and usable block (so
    test_figures_match_vllm compares kvtier with vLLM on it)."""
    computed = {c["id"] for c in _cases(_load(path)) if c["model"] == NEMOTRON}
    for tp in (1, 8):
        for dtype in ("auto", "fp8"):
            for gpu, offload in ((16, 16), (16, 256), (64, 64)):  # 16 over 64: refused
                for hybrid in ("hybrid-default", "hybrid-off"):
                    case = f"{NEMOTRON}/tp{tp}/{dtype}/gpu{gpu}-offload{offload}/{hybrid}"
                    assert case in computed, f"{case}: not computed by vLLM"
