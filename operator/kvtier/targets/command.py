"""What a container's command line says: whether it runs vLLM's OpenAI server, vLLM's own
arguments, and whether arguments appended to the container's args reach vLLM.

vLLM is started as `vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server
...` (in the command, the args, or split between them), or by a shell script
(`bash -c SCRIPT [WORD ...]`). Kubernetes runs command + args as one argv, so words appended
to args reach vLLM when it is started directly; a script gets them as its positional
parameters and passes them on only where it says so (`"$@"`, `$@`, `$*`): KServe's
multi-node Hugging Face runtime and OpenShift AI's multi-node worker do, a script that execs
vLLM with its own flags does not. `$(VAR)` references in args are Kubernetes' own expansion
of the container's env (KServe's multi-node runtimes pass TENSOR_PARALLEL_SIZE that way).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kvtier.targets import facts as read

SHELLS = ("sh", "bash", "dash", "ash")
ENTRYPOINT = "vllm.entrypoints.openai.api_server"
_FORWARDS = re.compile(r"\$@|\$\{@\}|\$\*|\$\{\*\}")
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def argv(container: Mapping[str, Any]) -> list[str]:
    """command + args, as the kubelet runs them (env references expanded)."""
    env = literal_env(container)
    words = read.str_args(container.get("command")) + read.str_args(container.get("args"))
    return [expand(w, env) for w in words]


def literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env variables with a literal value (valueFrom ones are unknown here)."""
    out: dict[str, str] = {}
    for entry in container.get("env") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            value = entry.get("value")
            if isinstance(value, str) and "valueFrom" not in entry:
                out[entry["name"]] = value
    return out


def expand(word: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a known variable is replaced, an unknown one kept."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), word)


def runs_vllm(container: Mapping[str, Any]) -> bool:
    """Whether the container's command and args start vLLM's OpenAI server (directly, or
    through a shell script that names it)."""
    words = argv(container)
    text = " ".join(words)
    return (
        "vllm serve" in text or ENTRYPOINT in text or (bool(words) and _program(words[0]) == "vllm")
    )


def script(container: Mapping[str, Any]) -> str | None:
    """The script of a container started as `sh -c SCRIPT ...`, else None."""
    words = argv(container)
    if not words or _program(words[0]) not in SHELLS:
        return None
    for i, word in enumerate(words[1:3], start=1):
        if word == "-c" and i + 1 < len(words):
            return words[i + 1]
    return None


def drops_args(container: Mapping[str, Any]) -> bool:
    """Whether words appended to the container's args never reach vLLM: it is started by a
    shell script that does not pass its positional parameters on."""
    text = script(container)
    return text is not None and not _FORWARDS.search(text)


def env_args(container: Mapping[str, Any], name: str) -> bool:
    """Whether the container's script evaluates env `name` into its vLLM command line, as
    KServe's llm-d templates do (`eval "exec vllm serve ... ${VLLM_ADDITIONAL_ARGS} $@"`):
    words kvtier adds to that env reach vLLM although the script drops its args, and eval's
    quote removal keeps kvtier's single-quoted JSON one word. A plain `$NAME` would split
    the JSON's quotes literally, so it does not count."""
    text = script(container)
    if text is None:
        return False
    ref = re.compile(rf"\$(?:{re.escape(name)}\b|\{{{re.escape(name)}(?::-)?\}})")
    for line in text.replace("\\\n", " ").splitlines():
        for marker in ("vllm serve", ENTRYPOINT):
            at = line.find(marker)
            if at >= 0 and re.search(r"\beval\b", line[:at]) and ref.search(line[at:]):
                return True
    return False


def server_args(container: Mapping[str, Any]) -> list[str]:
    """vLLM's own arguments: the argv after `serve` or the entrypoint module (flags and the
    model), however command and args split it; for a script, its words and the args it is
    given."""
    words = argv(container)
    text = script(container)
    if text is not None:
        # `sh -c SCRIPT NAME WORD...`: NAME is $0, the words after it are "$@".
        given = words[words.index(text) + 2 :] if _FORWARDS.search(text) else []
        return [*_script_words(text), *given]
    for i, word in enumerate(words):
        if word == "serve" or word == ENTRYPOINT:
            return words[i + 1 :]
    return read.str_args(container.get("args"))


def _script_words(text: str) -> list[str]:
    """The words after the last `vllm serve` / entrypoint in a script (its own flags)."""
    for marker in ("vllm serve", ENTRYPOINT):
        at = text.rfind(marker)
        if at >= 0:
            line = text[at + len(marker) :].split("\n", 1)[0]
            return [w for w in line.replace("\\", " ").split() if not _FORWARDS.search(w)]
    return []


def model(container: Mapping[str, Any]) -> str | None:
    """`vllm serve MODEL` (the positional model), else --model."""
    words = argv(container)
    if "serve" in words:
        after = words[words.index("serve") + 1 :]
        if after and not after[0].startswith("-"):
            return after[0]
    return read.flag(server_args(container), read.MODEL_FLAGS)
