"""The endpoint picker's own config loader as an oracle: what the picker runs with for a config
text kvtier writes (or a user's).

The harness is hack/oracles/epp/main.go, built against the picker's Go modules at pinned
versions by ``hack/oracles/epp/build`` (``make epp-oracle`` builds both before the tests; here
the build script only answers with the cached binary). It loads the text with
gateway-api-inference-extension's ``loader.LoadRawConfig`` and ``InstantiateAndConfigure``,
the plugin registry its runner builds, and reads each instantiated plugin's effective
parameters and the capacity of the prefix index it built.

Pickers:
    "gie"  -- gateway-api-inference-extension v1.5.0 (the base of llm-d inference scheduler
              v0.8.0): the prefix-cache-scorer keeps no index; the loader creates an
              approx-prefix-cache-producer from the last scorer's parameters unless the config
              declares producers, each then sized by its own parameters;
    "llmd" -- gateway-api-inference-extension v1.4.0, the base of llm-d-inference-scheduler
              v0.7.1 (the newest release the module proxy serves): each prefix-cache-scorer
              keeps an index of its own parameters; no approx-prefix-cache-producer plugin.
              llm-d's own plugins are not registered (their packages need a module the proxy
              refuses; hack/oracles/epp/build says which); kvtier writes none of them.

API:
    load(text, picker="gie") -> dict
        the harness's output: {"module", "version", "baseOf" (llmd), "ok"} and, loaded,
        "plugins" ({name: {"type", "declared", "parameters", "indexCapacity"}}) and "profiles"
        ({name: [{"pluginRef", "weight"}]}), else "stage" ("load" or "instantiate") and
        "error"; raises OracleError when the harness itself failed;
    index(text, plugin, picker="gie") -> dict
        the named plugin's entry of a text that must load (OracleError otherwise);
    version(picker) -> tuple[str, str]
        (gateway-api-inference-extension version, the llm-d release it is the base of or "")
        the harness was built from.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any, Literal, cast

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "hack" / "oracles" / "epp" / "build"
Picker = Literal["gie", "llmd"]
FLAGS: dict[str, list[str]] = {"gie": [], "llmd": ["--llmd"]}
# The approx-prefix-cache-producer the v1.5.0 loader adds for a prefix-cache-scorer.
LOADER_PRODUCER = "approx-prefix-cache-producer"


class OracleError(RuntimeError):
    pass


@functools.cache
def binary(picker: Picker = "gie") -> Path:
    """The harness, as the build script reports it (cached after `make epp-oracle`)."""
    proc = subprocess.run(
        ["bash", str(BUILD), *FLAGS[picker]], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise OracleError(
            f"{BUILD.relative_to(REPO)} {' '.join(FLAGS[picker])} failed (exit "
            f"{proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def load(text: str, picker: Picker = "gie") -> dict[str, Any]:
    proc = subprocess.run(
        [str(binary(picker))], input=text, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise OracleError(f"epp-oracle-{picker} (exit {proc.returncode}): {proc.stderr[-4000:]}")
    return cast(dict[str, Any], json.loads(proc.stdout))


def index(text: str, plugin: str, picker: Picker = "gie") -> dict[str, Any]:
    out = load(text, picker)
    if not out["ok"]:
        raise OracleError(f"epp-oracle-{picker} refused the text ({out['stage']}): {out['error']}")
    if plugin not in out["plugins"]:
        raise OracleError(f"epp-oracle-{picker}: no plugin {plugin} in {sorted(out['plugins'])}")
    return cast(dict[str, Any], out["plugins"][plugin])


def version(picker: Picker = "gie") -> tuple[str, str]:
    out = load("", picker)  # no text: the loader's default config
    return out["version"], out.get("baseOf", "")
