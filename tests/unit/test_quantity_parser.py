"""kvtier's own quantity parser reads every text as kubernetes.utils.parse_quantity does.

The Kubernetes client stays the oracle here (a dev/test dependency of this check); the sizing
package itself must not import it, so that `kvtier plan` starts fast (bench/startup.py).
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as oracle

from kvtier.sizing import SizingError, parse_count, parse_size
from kvtier.sizing.units import parse_quantity

_SUFFIXES = ["", "n", "u", "m", "k", "K", "M", "G", "T", "P", "E"]
_SUFFIXES += [s + "i" for s in "nukmKMGTPE"] + ["i", "B", "Gb", "GiB", "x"]
_NUMBERS = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.floats().map(repr),
    st.from_regex(r"\A[-+]?[0-9]{0,6}(\.[0-9]{0,4})?([eE][-+]?[0-9]{1,4})?\Z"),
    st.sampled_from(["", " ", "1 ", " 1", "1_000", "NaN", "-Infinity", "sNaN", ".", "e3"]),
)
_TEXTS = st.one_of(
    st.builds(lambda n, s: n + s, _NUMBERS, st.sampled_from(_SUFFIXES)),
    st.text(max_size=12),
)


def _outcome(parse: object, text: str) -> tuple[str, Decimal | None]:
    try:
        value = parse(text)  # type: ignore[operator]
    except ValueError:
        return "ValueError", None
    assert isinstance(value, Decimal)
    return ("nan", None) if value.is_nan() else ("ok", value)


@settings(max_examples=2000, deadline=None)
@given(_TEXTS)
@example("64Gi")
@example("1.5Mi")
@example("500m")
@example("1e3K")
@example("1ki")
@example("9" * 40 + "Ei")
def test_same_reading_as_the_kubernetes_client(text: str) -> None:
    assert _outcome(parse_quantity, text) == _outcome(oracle, text)


@given(st.one_of(st.integers(), st.decimals(allow_nan=False), st.floats(allow_nan=False)))
def test_numbers_pass_through_as_the_client_does(value: int | Decimal | float) -> None:
    assert parse_quantity(value) == oracle(value)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "sNaN", "1e999999", "1e99"])
def test_sizes_refuse_non_finite_and_beyond_int64(text: str) -> None:
    for parse in (parse_size, parse_count):
        with pytest.raises(SizingError) as err:
            parse(text, "--context")
        assert err.value.field == "--context"


def test_sizing_imports_no_kubernetes_client() -> None:
    code = (
        "import sys, kvtier.sizing\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'yaml', 'rich'))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
