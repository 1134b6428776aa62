"""A stand-in for Nemotron-Ultra-253B's custom config class, so vLLM can read its config.json.

Why a stand-in: nvidia/Llama-3_1-Nemotron-Ultra-253B-v1 declares its config class in its own
repository (`auto_map`: configuration_decilm.DeciLMConfig, loaded with trust_remote_code), and
neither transformers nor vLLM ships it; no package registry serves it, and this machine cannot
download from Hugging Face. `register()` gives transformers a class for model_type
"nemotron-nas" that does only what vLLM reads from the real one: a LlamaConfig whose
`block_configs` entries are objects (`block.attention.no_op`, `.n_heads_in_group`,
`block.ffn.no_op`, `.ffn_mult`, ...) and whose global `num_key_value_heads` and
`intermediate_size` are None, as the real class sets them (every block has its own). The real
class also picks an attention implementation for transformers' own model code (flash attention,
or eager for "unshifted sink" blocks, which this model has none of); vLLM does not read that.
Everything vLLM sizes is vLLM's own: ModelConfig's nemotron-nas branches and the model code
vllm/model_executor/models/nemotron_nas.py, which builds attention for each block unless
`attention.no_op`, with num_attention_heads // n_heads_in_group KV heads.

The config.json this is used with, tests/fixtures/configs/nemotron-ultra-253b.json, is the
model's own, https://huggingface.co/nvidia/Llama-3_1-Nemotron-Ultra-253B-v1/blob/main/
config.json, as NVIDIA copied it into NeMo ("Config copy from" that URL): github.com/NVIDIA/NeMo,
nemo/collections/llm/gpt/model/llama_nemotron_config.py,
LLAMA_31_NEMOTRON_ULTRA_253B_HETEROGENEOUS_CONFIG (added in commit 11741e5, 2025-04-23;
unchanged at 8cfedd7, 2025-09-20), every value as there (indented like the other fixtures).
It agrees with the GGUF conversion of the same checkpoint, whose loader log is public
(ik_llama.cpp issue 376, unsloth's Llama-3_1-Nemotron-Ultra-253B-v1 GGUF): 162 blocks,
deci.attention.head_count_kv = [8 x 9, 0, 0, 0, ...], feed_forward_length = [5376, 10752,
16128, ...] (ffn_mult 0.4875, 0.975, 1.4625 through DeciLM's rounding) and 648 tensors, which
is what these blocks give (64 attention blocks x 5 + 81 FFN blocks x 4 + 4). Every block's
attention is grouped-query (n_heads_in_group 16: 128 / 16 = 8 KV heads) or a no-op; none is
replace_with_linear, windowed, sparse or a sink.
"""

from __future__ import annotations

from typing import Any


class _Section:
    """A block's `attention` or `ffn` entry, read by attribute as vLLM reads the real one."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Block:
    def __init__(self, attention: dict[str, Any], ffn: dict[str, Any]) -> None:
        self.attention = _Section(**attention)
        self.ffn = _Section(**ffn)

    def to_dict(self) -> dict[str, Any]:
        return {"attention": self.attention.to_dict(), "ffn": self.ffn.to_dict()}


def register() -> None:
    """Register the stand-in with transformers' AutoConfig for model_type "nemotron-nas".

    Needs transformers (the vLLM virtualenv). With a local class registered, transformers
    builds the config without the repository's code (trust_remote_code stays off). From
    transformers 5 a config class is a validated dataclass (fields, __post_init__); before, a
    plain class with an __init__, as the real DeciLMConfig is written.
    """
    import dataclasses

    from transformers import AutoConfig, LlamaConfig

    def blocks(items: list[Any] | None) -> list[_Block]:
        return [b if isinstance(b, _Block) else _Block(**b) for b in items or []]

    def serialized(config: Any, out: dict[str, Any]) -> dict[str, Any]:
        out["block_configs"] = [b.to_dict() for b in config.block_configs]
        return out

    if dataclasses.is_dataclass(LlamaConfig):
        from huggingface_hub.dataclasses import strict

        # strict: validate against this class's own fields (intermediate_size may be None).
        @strict
        class DeciLMConfig(LlamaConfig):  # type: ignore[misc, valid-type]
            model_type = "nemotron-nas"
            intermediate_size: int | None = None
            block_configs: list[Any] | None = None

            def __post_init__(self, **kwargs: Any) -> None:
                super().__post_init__(**kwargs)
                # As the real class: every block carries its own KV heads and FFN width.
                self.num_key_value_heads = None
                self.intermediate_size = None
                self.block_configs = blocks(self.block_configs)

            def to_dict(self) -> dict[str, Any]:
                return serialized(self, super().to_dict())

    else:

        class DeciLMConfig(LlamaConfig):  # type: ignore[misc, valid-type, no-redef]
            model_type = "nemotron-nas"

            def __init__(self, block_configs: list[Any] | None = None, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.num_key_value_heads = None
                self.intermediate_size = None
                self.block_configs = blocks(block_configs)

            def to_dict(self) -> dict[str, Any]:
                return serialized(self, super().to_dict())

    AutoConfig.register("nemotron-nas", DeciLMConfig)
