"""What kvtier writes, byte for byte against the golden files under tests/golden/rendered: one
per target kind × tier type × vLLM release × role shape and per refusal (tests/golden/cases.py).
Nothing here rewrites them; `make golden` does, on purpose."""

from __future__ import annotations

import difflib

import pytest

from tests.golden.cases import Case, cases
from tests.golden.regenerate import COMMAND, RENDERED, SUFFIX, text

CASES = cases()
DIFF_LINES = 40


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rendered_writes_match_the_golden_file(case: Case) -> None:
    path = RENDERED / f"{case.name}{SUFFIX}"
    if not path.exists():
        pytest.fail(f"no golden file {path.name}: run {COMMAND}", pytrace=False)
    want = path.read_bytes()
    got = text(case).encode()
    if got == want:
        return
    diff = list(
        difflib.unified_diff(
            want.decode().splitlines(keepends=True),
            got.decode().splitlines(keepends=True),
            f"golden/{path.name}",
            "rendered now",
            n=2,
        )
    )
    more = f"... {len(diff) - DIFF_LINES} more lines\n" if len(diff) > DIFF_LINES else ""
    pytest.fail(
        f"{path.name} is not what the code renders now:\n{''.join(diff[:DIFF_LINES])}{more}"
        f"if the change is intended, run {COMMAND} and review the diff",
        pytrace=False,
    )


def test_every_golden_file_has_its_case() -> None:
    names = [f"{c.name}{SUFFIX}" for c in CASES]
    assert len(set(names)) == len(names), "two cases share a name"
    extra = sorted(p.name for p in RENDERED.iterdir() if p.name not in names)
    assert not extra, f"golden files without a case: {', '.join(extra)}; run {COMMAND}"
