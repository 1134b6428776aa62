"""The endpoint picker's version resolved as KServe v0.20 merges it: the object's own
annotation, else the last baseRef setting it, else the scheduler preset as found in the
cluster; a config kvtier cannot find leaves the version unknown."""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.render.picker_version import (
    ABSENT_VERSION,
    PINNED_PRESET,
    PRESET,
    VERSION_UNKNOWN_REASON,
    ConfigKey,
    PickerVersion,
    config_keys,
    picker_version,
    producer_layout,
)
from kvtier.render.scheduler import VERSION_ANNOTATION, SchedulerProblem

NS = "team-a"


def _scheduler(version: str | None = None, pool_ref: str | None = None) -> dict[str, Any]:
    scheduler: dict[str, Any] = {}
    if version is not None:
        scheduler["annotations"] = {VERSION_ANNOTATION: version, "other": "kept"}
    if pool_ref is not None:
        scheduler["pool"] = {"ref": {"name": pool_ref}}
    return scheduler


def target(
    version: str | None = None,
    base_refs: tuple[str, ...] = (),
    status: dict[str, Any] | None = None,
    pool_ref: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"router": {"scheduler": _scheduler(version, pool_ref)}}
    if base_refs:
        spec["baseRefs"] = [{"name": n} for n in base_refs]
    obj: dict[str, Any] = {"metadata": {"namespace": NS, "name": "qwen"}, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def config(namespace: str, name: str, version: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceServiceConfig",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"router": {"scheduler": _scheduler(version)}},
    }


def read(*objs: dict[str, Any]) -> dict[ConfigKey, dict[str, Any]]:
    return {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}


SHIPPED = config("kserve", PRESET, "0.9.0")


def _known(result: PickerVersion | SchedulerProblem) -> PickerVersion:
    assert isinstance(result, PickerVersion), result
    return result


def _value(result: PickerVersion | SchedulerProblem) -> str:
    return _known(result).value


def test_own_annotation_wins_over_base_refs_and_preset() -> None:
    configs = read(SHIPPED, config(NS, "old-picker", "0.8.0"))
    result = _known(picker_version(target("0.10.1", ("old-picker",)), configs))
    assert result.value == "0.10.1"
    assert "spec.router.scheduler.annotations" in result.source


def test_the_last_base_ref_setting_the_version_wins() -> None:
    configs = read(
        SHIPPED,
        config(NS, "first", "0.8.0"),
        config(NS, "second", "0.9.1"),
        config(NS, "silent"),
    )
    assert _value(picker_version(target(None, ("first", "second", "silent")), configs)) == "0.9.1"
    assert _value(picker_version(target(None, ("second", "first")), configs)) == "0.8.0"


def test_base_refs_override_the_preset() -> None:
    configs = read(SHIPPED, config("kserve", "shared-picker", "0.8.0"))
    result = _known(picker_version(target(None, ("shared-picker",)), configs))
    assert result.value == "0.8.0"
    assert "kserve/shared-picker" in result.source


def test_a_config_in_the_objects_namespace_hides_kserves() -> None:
    configs = read(config("kserve", "picker", "0.9.0"), config(NS, "picker", "0.8.0"), SHIPPED)
    assert _value(picker_version(target(None, ("picker",)), configs)) == "0.8.0"
    local_preset = config(NS, PRESET, "0.8.0")
    assert _value(picker_version(target(), read(SHIPPED, local_preset))) == "0.8.0"


def test_kserves_namespace_is_the_one_configured() -> None:
    moved = config("opendatahub", PRESET, "0.8.0")
    assert _value(picker_version(target(), read(SHIPPED, moved), "opendatahub")) == "0.8.0"
    assert (NS, PRESET) in config_keys(target(), "opendatahub")
    assert ("opendatahub", PRESET) in config_keys(target(), "opendatahub")


def test_the_preset_as_edited_in_the_cluster_decides() -> None:
    edited = config("kserve", PRESET, "0.8.0")
    version = _known(picker_version(target(), read(edited)))
    assert version.value == "0.8.0"
    assert producer_layout(version) is False
    assert producer_layout(_known(picker_version(target(), read(SHIPPED)))) is True


def test_the_pinned_preset_name_is_read_from_status() -> None:
    pinned = target(status={"annotations": {PINNED_PRESET: "v0-20-kserve-config-llm-scheduler"}})
    configs = read(SHIPPED, config("kserve", "v0-20-kserve-config-llm-scheduler", "0.8.0"))
    assert _value(picker_version(pinned, configs)) == "0.8.0"


def test_no_annotation_anywhere_is_kserves_zero_version() -> None:
    result = _known(picker_version(target(), read(config("kserve", PRESET))))
    assert result.value == ABSENT_VERSION
    assert producer_layout(result) is False
    # Set empty on the object, it hides the preset's value (KServe then reads 0.0.0).
    assert _value(picker_version(target(""), read(SHIPPED))) == ABSENT_VERSION


def test_a_pool_ref_means_no_preset() -> None:
    assert _value(picker_version(target(pool_ref="shared-pool"), {})) == ABSENT_VERSION


@pytest.mark.parametrize(
    ("obj", "configs", "named"),
    [
        (target(), {}, f"LLMInferenceServiceConfig {PRESET}"),
        (target(None, ("gone",)), read(SHIPPED), "LLMInferenceServiceConfig gone"),
    ],
)
def test_a_config_kvtier_cannot_find_leaves_the_version_unknown(
    obj: dict[str, Any], configs: dict[ConfigKey, dict[str, Any]], named: str
) -> None:
    result = picker_version(obj, configs)
    assert isinstance(result, SchedulerProblem)
    assert result.reason == VERSION_UNKNOWN_REASON
    assert named in result.message
    assert f"neither namespace {NS} nor KServe's kserve" in result.message


def test_a_missing_config_below_one_that_sets_the_version_does_not_matter() -> None:
    # The baseRef sets it, so the absent preset under it cannot change it.
    assert _value(picker_version(target(None, ("p",)), read(config(NS, "p", "0.8.0")))) == "0.8.0"


@pytest.mark.parametrize(
    ("value", "producer"),
    [
        ("0.9.0", True),
        ("0.9.0+build.7", True),
        ("0.10.0", True),
        ("1.0.0", True),
        ("0.9.0-rc.1", False),  # a pre-release sorts below its release
        ("0.8.3", False),
    ],
)
def test_producer_layout_follows_kserves_version_rules(value: str, producer: bool) -> None:
    assert producer_layout(PickerVersion(value, "here")) is producer


@pytest.mark.parametrize("value", ["v0.9.0", "0.9", "latest"])
def test_a_version_kserve_cannot_parse_is_reported(value: str) -> None:
    problem = producer_layout(PickerVersion(value, "LLMInferenceServiceConfig kserve/p"))
    assert isinstance(problem, SchedulerProblem)
    assert problem.reason == VERSION_UNKNOWN_REASON
    assert "kserve/p" in problem.message and repr(value) in problem.message
