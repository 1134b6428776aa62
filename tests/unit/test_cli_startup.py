"""Start-up: each command imports only what it needs (bench/startup.py times it)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvtier.cli
from kvtier.cli import build_parser
from kvtier.cli.commands import MODULES, names

# What `kvtier --help` loads of kvtier: the dispatcher, the command table and base.
DISPATCHER = {"kvtier.cli", "kvtier.cli.commands", "kvtier.cli.base"}

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
    assert _modules("--help") == DISPATCHER
    plan_help = _modules("plan", "--help")
    assert "kvtier.sizing" in plan_help
    # plan's own module and the shared checks, no other command's module, no plot writer.
    cli = {m for m in plan_help if m.startswith("kvtier.cli")}
    assert cli == {*DISPATCHER, "kvtier.cli.plan", "kvtier.cli.args"}


def test_help_wraps_at_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtier.cli.base import HelpFormatter, terminal_width

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
    assert "kvtier.cli.plan" in loaded and "kvtier.sizing.plan" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("kubernetes", "yaml", "rich", "kopf")}
    assert "shutil" not in loaded
    # The sizing engine's value classes are Records: no dataclasses (which imports inspect),
    # no typing.
    assert not {"dataclasses", "typing"} & loaded
    # Nor another command's module, nor the plot writer.
    others = {m for m in MODULES if m != "kvtier.cli.plan"} | {"kvtier.cli.plot"}
    assert not others & loaded


@pytest.mark.parametrize("command", ["plan", "models", "operator", "probe"])
def test_each_command_is_listed_with_its_modules_help(command: str) -> None:
    lazy = build_parser("")._subparsers._group_actions[0]
    full = build_parser(command)._subparsers._group_actions[0]
    helps = {a.dest: a.help for a in lazy._choices_actions}
    assert helps == {a.dest: a.help for a in full._choices_actions}
    assert command in names()


def _imported(path: Path) -> set[str]:
    """The modules a file names in its import statements (`from M import x` counts as M)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: a relative import"
            found.add(node.module or "")
    return found


def test_no_cli_module_imports_the_dispatcher() -> None:
    # The dispatcher loads a command's module by name; a command module importing the
    # dispatcher back would be a cycle. The command table imports nothing at all.
    package = Path(kvtier.cli.__file__).parent
    modules = sorted(p for p in package.glob("*.py") if p.name != "__init__.py")
    assert {f"kvtier.cli.{p.stem}" for p in modules} >= set(MODULES)
    for path in modules:
        assert "kvtier.cli" not in _imported(path), path.name
    assert _imported(package / "commands.py") == set()
