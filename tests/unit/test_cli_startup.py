"""Start-up: each command imports only what it needs (bench/startup.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvtier.cli import SUBCOMMAND_MODULES, build_parser

_PROBE = (
    "import json, sys\n"
    "from kvtier.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "heavy = ('kubernetes', 'kopf', 'pydantic', 'yaml', 'rich', 'matplotlib', 'kvtier.',\n"
    "         'typing', 'shutil', 'dataclasses')\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))), file=sys.stderr)\n"
)


def _modules(*argv: str) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=False
    )
    loaded: list[str] = json.loads(run.stderr.strip().splitlines()[-1])
    return set(loaded)


def test_help_imports_no_subcommand_module() -> None:
    # Not even typing or shutil (argparse's stock formatter imports it for the width).
    assert _modules("--help") == {"kvtier.cli"}
    assert _modules("plan", "--help") >= {"kvtier.cli_plan", "kvtier.sizing"}


def test_help_wraps_at_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.cli import HelpFormatter, terminal_width

    monkeypatch.setenv("COLUMNS", "50")
    assert terminal_width() == 50
    assert HelpFormatter("kvtier")._width == 48  # argparse keeps 2 columns spare
    text = build_parser("plan")._subparsers._group_actions[0].choices["plan"].format_help()
    options = text.split("options:", 1)[1]
    assert max(len(line) for line in options.splitlines()) <= 50
    monkeypatch.setenv("COLUMNS", "junk")
    assert terminal_width() >= 1


def test_plan_json_imports_no_kubernetes_yaml_rich_or_dataclasses() -> None:
    loaded = _modules("plan", "--model", "llama-3.1-70b", "--context", "128Ki", "-o", "json")
    assert "kvtier.cli_plan" in loaded and "kvtier.sizing.plan" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("kubernetes", "yaml", "rich", "kopf")}
    assert "shutil" not in loaded
    # The sizing engine's value classes are Records: no dataclasses (which imports inspect),
    # no typing.
    assert not {"dataclasses", "typing"} & loaded
    assert not {m for m in loaded if m.startswith(("kvtier.cli_operator", "kvtier.cli_probe"))}


@pytest.mark.parametrize("command", ["plan", "models", "operator", "probe"])
def test_each_command_is_listed_with_its_modules_help(command: str) -> None:
    lazy = build_parser("")._subparsers._group_actions[0]
    full = build_parser(command)._subparsers._group_actions[0]
    helps = {a.dest: a.help for a in lazy._choices_actions}
    assert helps == {a.dest: a.help for a in full._choices_actions}
    assert command in {n for commands in SUBCOMMAND_MODULES.values() for n in commands}
