"""The llm-d endpoint picker configs the scheduler tests keep in a ConfigMap, laid out as a user
keeps them in git (both picker layouts), and a reader of one plugin's parameters in such text
for the tests of the text's layout (what the picker makes of a text: tests/epp_oracle.py)."""

from __future__ import annotations

from typing import Any

import yaml

from kvtier.render.scheduler import CPU_SCORER

# llm-d's tiered-prefix-cache guide layout: comments, flow maps and a blank line that only a
# byte-exact edit in place keeps.
EPP = """\
# Endpoint picker for qwen: GPU and CPU prefix scorers (llm-d tiered-prefix-cache guide).
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
  name: gpu-prefix-cache-scorer
- type: prefix-cache-scorer
  name: cpu-prefix-cache-scorer
  parameters:
    autoTune: false   # vLLM reports no CPU-tier capacity
    lruCapacityPerServer: 41000

- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - {pluginRef: gpu-prefix-cache-scorer, weight: 1}
  - {pluginRef: cpu-prefix-cache-scorer, weight: 1}
  - pluginRef: max-score-picker
"""
# The CPU scorer's parameters as EPP writes them, for layouts derived from it.
CPU_PARAMETERS = """\
  parameters:
    autoTune: false   # vLLM reports no CPU-tier capacity
    lruCapacityPerServer: 41000
"""

# llm-d router v0.9.0's tiered layout: the CPU scorer reads the producer it names.
EPP_09 = EPP.replace(
    CPU_PARAMETERS, "  parameters:\n    prefixMatchInfoProducerName: cpuPrefixProducer\n"
).replace(
    "- type: queue-scorer\n",
    "- type: queue-scorer\n- type: approx-prefix-cache-producer\n  name: cpuPrefixProducer\n"
    "  parameters:\n    blockSizeTokens: 64   # the producer's floor\n",
)


def plugin_parameters(text: str | None, name: str = CPU_SCORER) -> Any:
    """The parameters of plugin `name` in the config text; None without text or parameters."""
    if text is None:
        return None
    plugins = yaml.safe_load(text)["plugins"]
    return next(p for p in plugins if p.get("name") == name).get("parameters")
