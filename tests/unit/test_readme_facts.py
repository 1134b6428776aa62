"""What README.md states about the chart, the benchmark and the CLI matches the files; LICENSE
is the Apache-2.0 text pyproject and the chart declare; examples/plan-study.sh fails clearly
without kvtier on PATH."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the full text of the license.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
_NUMBERS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def test_license_is_the_full_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == "Apache-2.0"
    chart = (REPO / "charts" / "kvtier-operator" / "Chart.yaml").read_text(encoding="utf-8")
    assert "license: Apache-2.0" in chart


def test_readme_states_the_charts_deployment_strategy() -> None:
    deployment = REPO / "charts" / "kvtier-operator" / "templates" / "deployment.yaml"
    strategy = re.search(r"strategy:\s*\n\s+type:\s*(\w+)", deployment.read_text())
    assert strategy is not None
    kind = strategy[1]
    assert f"Deployment uses the `{kind}` strategy" in README
    others = {"Recreate", "RollingUpdate"} - {kind}
    assert not any(f"`{other}` strategy" in README for other in others)


def test_readme_states_the_benchmarks_run_count() -> None:
    source = (REPO / "bench" / "convergence.py").read_text(encoding="utf-8")
    repeat = re.search(r'"--repeat", type=int, default=(\d+)', source)
    assert repeat is not None
    runs = int(repeat[1])
    assert f"{_NUMBERS[runs]} runs each" in README
    assert not any(f"{word} runs each" in README for n, word in _NUMBERS.items() if n != runs)


def test_readme_lists_prerequisites_and_a_cli_install() -> None:
    assert "\n## Prerequisites\n" in README
    prerequisites = README.split("\n## Prerequisites\n", 1)[1].split("\n## ", 1)[0]
    for needed in ("Python 3.11", "fio", "Go 1.26", "Kubernetes 1.30"):
        assert needed in prerequisites, needed
    assert "pipx install ." in README and "examples/plan-study.sh" in README


def test_plan_study_without_kvtier_on_path_says_how_to_install(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("env", "bash"):
        found = shutil.which(tool)
        assert found is not None
        (bare / tool).symlink_to(found)
    run = subprocess.run(
        [bash, str(REPO / "examples" / "plan-study.sh")],
        env={"PATH": str(bare), "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 127 and run.stdout == ""
    assert "kvtier is not on PATH" in run.stderr and "pipx install ." in run.stderr


def test_plan_study_runs_with_kvtier_on_path() -> None:
    # The environment the tests run in installs kvtier's entry point beside its Python.
    scripts = Path(sys.executable).parent
    assert (scripts / "kvtier").exists(), f"no kvtier entry point in {scripts}"
    run = subprocess.run(
        ["bash", str(REPO / "examples" / "plan-study.sh")],
        env={**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "5,242,880" in run.stdout
