"""A ServingRuntime's change wakes the tiers whose InferenceService runs on it (issue Q, item 1),
on KServe's real InferenceService controller (tests/e2e/kserve_isvc.py).

kvtier reads ServingRuntimes through a watch of its own (read-only RBAC). Here the platform
team fixes a runtime whose script dropped the container's args: the tier, refused with
FlagNotPassed, applies without anyone touching the tier or the service, and the pod KServe
builds from the fixed runtime runs vLLM with kvtier's flag. So that no periodic pass can
wake the tier, the operator for this module runs with its default resync (300 s) instead of
the tests' 5 s (the stack's own operator is started again afterwards): what wakes it is the
runtime's watch event, or KServe's own update of the service, read with the runtime as the
watch last delivered it. Without the watch kvtier knows no runtime at all (RuntimeNotFound).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from tests.e2e.kserve_isvc import (
    GROUP,
    KServeISVCStack,
    apply_runtime,
    container,
    create_isvc,
    get_isvc,
    vllm_argv,
)
from tests.e2e.kube_helpers import create_tier
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_isvc_runtime_offload import (
    CONTAINER,
    KV_FLAG,
    args_dropping_runtime,
    isvc,
    settled_template,
    tier_spec,
    waited,
)
from tests.kserve_runtime_oracle import runtime_fixture

pytestmark = pytest.mark.timeout(600)

# Well inside the operator's default 300 s resync: only the watch can wake the tier this soon.
WAKE_SECONDS = 60


@pytest.fixture
def watch_only(
    kserve_isvc_stack: KServeISVCStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """kvtier's operator with its own default resync, in place of the stack's."""
    stack = kserve_isvc_stack
    stack.operator.stop()
    log = tmp_path_factory.mktemp("runtime-watch") / "operator.log"
    proc = OperatorProcess(stack.cluster, log, resync_seconds=None).start()
    try:
        yield proc
    finally:
        proc.stop()
        stack.operator.start()
        print(f"operator log: {log}")


def test_fixing_a_runtime_wakes_its_tier_and_the_flag_reaches_vllm(
    kserve_isvc_stack: KServeISVCStack,
    watch_only: OperatorProcess,
    kserve_namespace: Callable[[client.ApiClient, str], str],
) -> None:

    stack = kserve_isvc_stack
    ns = kserve_namespace(stack.api, "runtime-watch")
    fixed = runtime_fixture("vllm-cuda-runtime")
    apply_runtime(stack.api, ns, args_dropping_runtime("vllm-runtime"))
    name = "served"
    create_isvc(stack.api, ns, isvc(name, runtime="vllm-runtime"))
    user_spec = get_isvc(stack.api, ns, name)["spec"]
    spec = tier_spec(name, disk={"type": "None"}, model={"vllmVersion": "0.24.0"})
    create_tier(stack.api, ns, name, spec)
    waited(stack, ns, name, "Applied", "False", "FlagNotPassed", timeout=120)
    assert get_isvc(stack.api, ns, name)["spec"] == user_spec  # nothing written

    # The platform team fixes the runtime: only the runtime changes.
    runtimes = client.CustomObjectsApi(stack.api)
    current = cast(
        dict[str, Any],
        runtimes.get_namespaced_custom_object(
            GROUP, "v1alpha1", ns, "servingruntimes", "vllm-runtime"
        ),
    )
    current["spec"]["containers"] = fixed["spec"]["containers"]
    runtimes.replace_namespaced_custom_object(
        GROUP, "v1alpha1", ns, "servingruntimes", "vllm-runtime", current
    )
    fixed_at = time.monotonic()
    tier = waited(stack, ns, name, "Applied", "True", timeout=WAKE_SECONDS)
    woke = time.monotonic() - fixed_at
    assert watch_only.resyncs() == 0, "a periodic pass ran: the watch is not what woke the tier"
    print(f"the tier applied {woke:.1f}s after the runtime was fixed")

    # The pod KServe now builds runs vLLM with kvtier's flag, as the status says.
    args = get_isvc(stack.api, ns, name)["spec"]["predictor"]["model"]["args"]
    want = args[args.index(KV_FLAG) + 1]
    assert str(tier["status"]["sizing"]["cpuBytesToUse"]) in want, want
    tpl = settled_template(stack, ns, name, want)
    argv = vllm_argv(container(tpl["spec"], CONTAINER))
    assert argv[argv.index(KV_FLAG) + 1] == want, argv
