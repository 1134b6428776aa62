"""The `kvtier` commands: the module that registers each, and its one-line help.

This module imports nothing. The dispatcher lists every command in `kvtier --help` from it
without loading a command's module, and each command module reads its own help here, so no
module imports the dispatcher back.
"""

# module → its commands and their one-line help, in the order `kvtier --help` lists them.
MODULES: dict[str, dict[str, str]] = {
    "kvtier.cli.plan": {
        "plan": "size the KV-cache tiers for a model and workload",
        "models": "list the built-in model catalog",
    },
    "kvtier.cli.operator": {"operator": "run the kvtier operator"},
    "kvtier.cli.probe": {"probe": "measure a disk tier with fio at the model's block size"},
    "kvtier.cli.evict": {"evict": "keep a vLLM fs tier directory below its high watermark"},
    "kvtier.cli.simulate": {"simulate": "what-if simulation of the tiers under agentic load"},
}


def names() -> frozenset[str]:
    """Every command's name."""
    return frozenset(name for commands in MODULES.values() for name in commands)


def summary(command: str) -> str:
    """`command`'s one-line help; KeyError for a command no module registers."""
    for commands in MODULES.values():
        if command in commands:
            return commands[command]
    raise KeyError(command)
