"""The operator sizes for the vLLM the target runs: its flags, its image, the tier's version."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from kvtier.api.policy import KVCachePolicySpec
from kvtier.api.tier import KVCacheTierSpec, ValueSource
from kvtier.policy.decide import decide
from kvtier.settings import effective_settings, with_target_vllm_version
from kvtier.targets.registry import target_facts
from kvtier.targets.server_flags import image_vllm_version, server_flags
from tests.unit.test_decide import conds, facts, llmisvc, tier


def _with_main(target: dict[str, Any], **container: Any) -> dict[str, Any]:
    target = copy.deepcopy(target)
    target["spec"]["template"]["containers"][0].update(container)
    return target


def test_flags_from_args_and_vllm_additional_args() -> None:
    flags = server_flags(
        {
            "image": "docker.io/vllm/vllm-openai:v0.33.0",
            "args": ["--block-size", "64", "--kv-cache-dtype=FP8", "--max-model-len", "32K"],
            "env": [
                {
                    "name": "VLLM_ADDITIONAL_ARGS",
                    "value": "--disable-hybrid-kv-cache-manager -dp 2 "
                    "--distributed-executor-backend ray",
                }
            ],
        }
    )
    assert flags.gpu_block_tokens == 64
    assert flags.kv_cache_dtype == "fp8"
    assert flags.max_model_len == 32 * 1024  # vLLM: K is 1024, k 1000
    assert flags.hybrid_kv_cache_manager is False
    assert flags.data_parallel_size == 2
    assert flags.distributed_executor_backend == "ray"
    assert flags.image_vllm_version == "0.33.0"


def test_absent_flags_are_none_and_the_last_one_wins() -> None:
    flags = server_flags({"args": ["--block-size", "16", "--block-size=32"]})
    assert flags.gpu_block_tokens == 32
    assert flags.kv_cache_dtype is None and flags.hybrid_kv_cache_manager is None
    assert (
        server_flags({"env": [{"name": "VLLM_ADDITIONAL_ARGS", "value": "'x"}]}).max_model_len
        is None
    )


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.24.0", "0.24.0"),
        ("quay.io/mirror/vllm-openai:0.33.1@sha256:abc", "0.33.1"),
        ("registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2", None),  # a product version
        ("vllm/vllm-openai:latest", None),
        (None, None),
    ],
)
def test_image_version_only_from_upstream_vllm_tags(image: object, version: str | None) -> None:
    assert image_vllm_version(image) == version


def test_version_precedence_tier_target_policy_default() -> None:
    spec = KVCacheTierSpec.model_validate(tier()["spec"])
    policy = KVCachePolicySpec.model_validate({"defaults": {"vllmVersion": "0.33"}})
    eff = effective_settings(spec, policy)
    assert (eff.vllm_version.value, eff.vllm_version.source) == ("0.33", ValueSource.POLICY)
    assert with_target_vllm_version(eff, "0.24.0").vllm_version.source is ValueSource.TARGET
    assert effective_settings(spec, None).vllm_version.value == "0.24"
    own = KVCacheTierSpec.model_validate(tier(model={"vllmVersion": "0.33.0"})["spec"])
    assert with_target_vllm_version(effective_settings(own, None), "0.24.0").vllm_version.value == (
        "0.33.0"
    )


def test_an_unknown_release_is_refused_at_validation() -> None:
    with pytest.raises(ValidationError, match=r"0\.24\.x, 0\.33\.x"):
        KVCacheTierSpec.model_validate(tier(model={"vllmVersion": "0.28.0"})["spec"])


def test_target_image_and_flags_size_the_tier() -> None:
    """A DeepSeek server on vLLM 0.33 at TP 8: the replicated MLA copy, 64-token GPU blocks."""
    target = llmisvc(uri="hf://deepseek-ai/DeepSeek-V3")
    target = _with_main(target, image="vllm/vllm-openai:v0.33.0", args=["--block-size", "64"])
    d = decide(facts(tier(model={"blockSizeTokens": 64}), target=target))
    assert conds(d.status)["Sized"]["status"] == "True", conds(d.status)["Sized"]
    assert d.sizing is not None
    assert d.sizing.input.vllm_version == "0.33.0" and d.sizing.input.gpu_block_tokens == 64
    assert d.sizing.layout.replicated
    assert {"field": "model.vllmVersion", "value": "0.33.0", "source": "Target"} in d.status[
        "effective"
    ]


def test_offload_block_not_a_multiple_of_the_targets_gpu_block_is_refused() -> None:
    target = _with_main(llmisvc(), args=["--block-size", "64"])
    d = decide(facts(tier(), target=target))
    sized = conds(d.status)["Sized"]
    assert sized["status"] == "False" and "multiple of the GPU block size 64" in sized["message"]


def test_unknown_release_in_the_image_is_a_condition_not_a_guess() -> None:
    target = _with_main(llmisvc(), image="vllm/vllm-openai:v0.28.0")
    sized = conds(decide(facts(tier(), target=target)).status)["Sized"]
    assert sized["status"] == "False" and sized["reason"] == "UnsupportedVLLMVersion"
    assert "the target's image is vLLM 0.28.0" in sized["message"]


def test_kv_cache_dtype_follows_the_target_and_refuses_a_mismatch() -> None:
    fp8 = _with_main(llmisvc(), args=["--kv-cache-dtype", "fp8"])
    d = decide(facts(tier(), target=fp8))
    assert d.sizing is not None and d.sizing.kv_cache_dtype == "fp8"
    bf16 = _with_main(llmisvc(), args=["--kv-cache-dtype", "bfloat16"])
    sized = conds(decide(facts(tier(model={"kvCacheDtype": "fp8"}), target=bf16)).status)["Sized"]
    assert sized["reason"] == "KVCacheDtypeMismatch"
    assert "the target passes --kv-cache-dtype bfloat16" in sized["message"]


def _env_args(write: Any) -> str:
    (main,) = write.body["spec"]["template"]["containers"]
    return str(next(e["value"] for e in main["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"))


def test_a_dtype_the_target_does_not_pass_is_passed_by_kvtier_once() -> None:
    """fp8 on the tier, nothing on the target: kvtier sizes for fp8 and passes the flag (in
    VLLM_ADDITIONAL_ARGS: the native field has no place for it). On the patched target its
    own flag does not count as the user's, so the next decision writes the same."""
    d = decide(facts(tier(mode="Apply", model={"kvCacheDtype": "fp8"})))
    assert conds(d.status)["Sized"]["status"] == "True"
    assert d.sizing is not None and d.sizing.kv_cache_dtype == "fp8"
    (patch,) = [w for w in d.writes if w.kind == "LLMInferenceService"]
    assert patch.api_version == "serving.kserve.io/v1alpha1"
    assert _env_args(patch).startswith("--kv-cache-dtype fp8 --kv-transfer-config '")
    patched = copy.deepcopy(llmisvc())
    patched["metadata"]["annotations"] = patch.body["metadata"]["annotations"]
    main = patched["spec"]["template"]["containers"][0]
    main["env"] = [{"name": "VLLM_ADDITIONAL_ARGS", "value": _env_args(patch)}]
    again = decide(facts(tier(mode="Apply", model={"kvCacheDtype": "fp8"}), target=patched))
    assert again.sizing is not None and again.sizing.kv_cache_dtype == "fp8"
    (same,) = [w for w in again.writes if w.kind == "LLMInferenceService"] or [patch]
    assert _env_args(same) == _env_args(patch)


def test_a_dtype_the_target_serves_under_another_name_is_no_mismatch() -> None:
    """Nemotron is a bf16 checkpoint: bfloat16 on the tier is what `auto` serves."""
    d = decide(facts(tier(model={"kvCacheDtype": "bfloat16"})))
    assert conds(d.status)["Sized"]["status"] == "True"
    e4m3 = _with_main(llmisvc(), args=["--kv-cache-dtype", "fp8_e4m3"])
    d = decide(facts(tier(model={"kvCacheDtype": "fp8"}), target=e4m3))
    assert conds(d.status)["Sized"]["status"] == "True"


def test_disabled_hybrid_manager_on_the_target_sizes_every_layer_per_chunk() -> None:
    target = llmisvc(tp=1, uri="hf://openai/gpt-oss-120b")
    on = decide(facts(tier(), target=target)).sizing
    off = decide(
        facts(tier(), target=_with_main(target, args=["--disable-hybrid-kv-cache-manager"]))
    ).sizing
    assert on is not None and off is not None
    assert off.sizing.block_bytes == 2 * on.sizing.block_bytes  # 36 layers vs one 18-layer group


def test_target_facts_carry_the_flags() -> None:
    target = _with_main(llmisvc(), args=["--max-model-len", "65536"])
    assert target_facts(target).server.max_model_len == 65536
