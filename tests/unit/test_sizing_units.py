"""Quantities, bandwidths, durations and human-readable bytes."""

import pytest

from kvtier.sizing import SizingError, human_bytes, parse_bandwidth, parse_count, parse_size
from kvtier.sizing.units import parse_seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64Gi", 64 * 2**30), ("64G", 64 * 10**9), ("1.5Gi", 3 * 2**29), ("1048576", 2**20), (7, 7)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text, "--cpu") == expected


@pytest.mark.parametrize("text", ["0", "-1Gi", "0.5", "lots", "64GB"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(SizingError) as err:
        parse_size(text, "--cpu")
    assert err.value.field == "--cpu"


def test_token_counts_take_binary_suffixes() -> None:
    assert parse_count("128Ki", "--context") == 131_072
    assert parse_count("50000", "--context") == 50_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("205MB/s", 205_000_000),
        ("205 MB/s", 205_000_000),
        ("205M", 205_000_000),
        ("1.5GiB/s", 1_610_612_736),
        ("800KB/s", 800_000),
        (3e9, 3_000_000_000),
    ],
)
def test_parse_bandwidth(text: str | float, expected: int) -> None:
    assert parse_bandwidth(text, "bw") == expected


@pytest.mark.parametrize("text", ["fast", "0MB/s", "-5MB/s"])
def test_parse_bandwidth_refuses(text: str) -> None:
    with pytest.raises(SizingError):
        parse_bandwidth(text, "bw")


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan", "inf"])
def test_parse_seconds_refuses(text: str) -> None:
    with pytest.raises(SizingError):
        parse_seconds(text, "--ttft")


def test_human_bytes() -> None:
    assert human_bytes(40 * 2**30) == "40 GiB (42.95 GB)"
    assert human_bytes(5_242_880) == "5 MiB (5.24 MB)"
    assert human_bytes(512) == "512 B"
