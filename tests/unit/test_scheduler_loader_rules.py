"""kvtier writes no scheduler config that the endpoint picker's loader would refuse, or whose
index another plugin would size: the rules the picker's own loader showed
(tests/e2e/test_epp_oracle.py runs it on the same texts), kept in the pure render layer."""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.render.scheduler import (
    CPU_SCORER,
    UNKNOWN_CONFIG_REASON,
    SchedulerProblem,
    SchedulerSync,
)
from tests.unit.test_render_scheduler import DECODE, epp_config, producer_config, sync_of, target


def _at_09(config: dict[str, Any]) -> dict[str, Any]:
    obj = target(config)
    obj["spec"]["router"]["scheduler"]["annotations"] = {"app.kubernetes.io/version": "0.9.0"}
    return obj


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        ({"blockSizeTokens": 0}, "blockSizeTokens 0 is not a block size (with autoTune false"),
        ({"blockSize": 64, "blockSizeTokens": 0}, "blockSizeTokens 0 is not a block size"),
        ({"blockSizeTokens": True}, "blockSizeTokens True is not a block size;"),
        ({"maxPrefixTokensToMatch": -1}, "maxPrefixTokensToMatch -1, below 0"),
        ({"maxPrefixBlocksToMatch": "256"}, "maxPrefixBlocksToMatch '256', not a whole number"),
        ({"maxPrefixTokensToMatch": 1.5}, "maxPrefixTokensToMatch 1.5, not a whole number"),
        ({"blockSize": "64", "blockSizeTokens": 16}, "blockSize '64', not a whole number"),
    ],
)
def test_parameters_the_loader_refuses_are_reported_not_written(
    parameters: dict[str, Any], words: str
) -> None:
    result = sync_of(target(epp_config(parameters)), [DECODE])
    assert isinstance(result, SchedulerProblem) and result.reason == UNKNOWN_CONFIG_REASON
    assert words in result.message and "kvtier leaves it alone" in result.message
    # The same rules for the producer a 0.9.0 picker's CPU scorer names.
    result = sync_of(_at_09(producer_config(parameters)), [DECODE])
    assert isinstance(result, SchedulerProblem) and words in result.message


@pytest.mark.parametrize(
    "parameters",
    [
        {"blockSizeTokens": None, "maxPrefixTokensToMatch": 0},  # null: the default
        {"blockSize": 64, "blockSizeTokens": 32, "maxPrefixBlocksToMatch": 512},
        # kvtier overwrites these two, whatever the user had.
        {"autoTune": "yes", "lruCapacityPerServer": "many"},
    ],
)
def test_parameters_the_loader_takes_are_written(parameters: dict[str, Any]) -> None:
    sync = sync_of(target(epp_config(parameters)), [DECODE])
    assert isinstance(sync, SchedulerSync), sync
    cpu = next(p for p in sync.plugins if p.get("name") == CPU_SCORER)
    assert cpu["parameters"]["autoTune"] is False


def test_a_cpu_scorer_before_another_prefix_scorer_is_not_written() -> None:
    config = epp_config()
    config["plugins"][1], config["plugins"][2] = config["plugins"][2], config["plugins"][1]
    result = sync_of(target(config), [DECODE])
    assert isinstance(result, SchedulerProblem) and result.reason == UNKNOWN_CONFIG_REASON
    assert "is followed by prefix-cache-scorer gpu-prefix-cache-scorer" in result.message
    assert "list cpu-prefix-cache-scorer last" in result.message


def test_a_scorer_beside_a_declared_producer_before_09_is_not_written() -> None:
    config = epp_config()
    config["plugins"].insert(0, {"type": "approx-prefix-cache-producer", "name": "producer"})
    result = sync_of(target(config), [DECODE])  # a 0.8.0 picker
    assert isinstance(result, SchedulerProblem) and result.reason == UNKNOWN_CONFIG_REASON
    assert "sits beside an approx-prefix-cache-producer" in result.message
    # From 0.9.0 the producer is where kvtier writes, after any scorer.
    assert isinstance(sync_of(_at_09(producer_config()), [DECODE]), SchedulerSync)
