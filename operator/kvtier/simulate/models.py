"""Parameter counts the sizing catalog does not hold: total, active per token, and experts.

From each model's card and config.json (`num_local_experts` / `num_experts`,
`num_experts_per_tok`). A mixture of experts computes with its active parameters, and a
decode step reads only the experts its batch routes to (setup.Derived.decode_seconds).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelParameters:
    total: float
    active: float | None = None  # None: dense
    experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0


MODEL_PARAMETERS = {
    "openai/gpt-oss-120b": ModelParameters(116.83e9, 5.13e9, 128, 4),
    "openai/gpt-oss-20b": ModelParameters(20.91e9, 3.61e9, 32, 4),
    "Qwen/Qwen3-30B-A3B": ModelParameters(30.5e9, 3.3e9, 128, 8),
    "Qwen/Qwen3-235B-A22B": ModelParameters(235e9, 22e9, 128, 8),
    "deepseek-ai/DeepSeek-V3": ModelParameters(671e9, 37e9, 256, 8),
    "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1": ModelParameters(253e9),
    "meta-llama/Llama-3.1-8B-Instruct": ModelParameters(8.03e9),
    "meta-llama/Llama-3.1-70B-Instruct": ModelParameters(70.6e9),
    "Qwen/Qwen3-8B": ModelParameters(8.2e9),
    "Qwen/Qwen3-14B": ModelParameters(14.8e9),
    "Qwen/Qwen3-32B": ModelParameters(32.8e9),
}
