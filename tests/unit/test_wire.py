"""JSON decoding of API responses and watch events."""

from __future__ import annotations

import json

import pytest

from kvtier.kube.wire import decode


def test_decodes_like_the_standard_library() -> None:
    line = json.dumps(
        {"type": "MODIFIED", "object": {"metadata": {"name": "tier-ü", "generation": 3}}}
    )
    assert decode(line.encode()) == json.loads(line)
    assert decode(line) == json.loads(line)


def test_integers_the_api_server_sends_are_exact() -> None:
    line = '{"spec": {"cpu": {"bytes": 9223372036854775807}, "small": -9223372036854775808}}'
    assert decode(line) == {"spec": {"cpu": {"bytes": 2**63 - 1}, "small": -(2**63)}}


def test_what_orjson_refuses_still_decodes() -> None:
    value = decode(b'{"x": NaN}')["x"]
    assert value != value
    assert decode(b'{"x": Infinity}')["x"] == float("inf")


def test_malformed_json_is_an_error() -> None:
    with pytest.raises(ValueError):
        decode(b'{"type": "ADDED", "object": {')
