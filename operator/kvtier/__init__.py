"""kvtier: KV-cache offload tiers for vLLM / llm-d model servers, sized from the model."""

__version__ = "0.1.0"
