"""`kvtier simulate`: what would each tier do for this model, GPU and workload?

Without flags it runs the study's setup (Nemotron-Ultra-253B at TP 8 on 8×H100, ~50K-token
agentic prompts); every flag changes one input. simpy, rich and matplotlib load only here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

from kvtier.cli.args import accept_negative_values, count, number, size_bytes, sizing_error
from kvtier.cli.base import CliError
from kvtier.cli.commands import summary

if TYPE_CHECKING:
    from rich.console import Console

    from kvtier.cli.base import Subparsers
    from kvtier.simulate import SimConfig, Simulation, Workload
    from kvtier.simulate.calibrate import Calibration
    from kvtier.simulate.workload import SharedPrefix, Trace

OUTPUTS = ("table", "json")
DRAIN_SECONDS = 300.0  # after an open-loop sweep or trace: time for the queues to empty
# SizingError.field → the flag that sets it.
_FLAGS = {
    "model": "--model",
    "parameters": "--params",
    "weightBytes": "--weight-bytes",
    "queryHeads": "--query-heads",
    "tensorParallelSize": "--tp",
    "kvCacheDtype": "--kv-dtype",
    "sessions": "--sessions",
    "averageContextTokens": "--context",
    "outputTokens": "--output-tokens",
    "toolTokens": "--tool-tokens",
    "thinkSeconds": "--think",
    "systemPromptTokens": "--system-prompt",
    "contextSpread": "--context",
    "replicas": "--replicas",
    "cpu.size": "--cpu",
    "nodeMemoryBytes": "--node-memory",
    "disk": "--disk",
    "tierP99Seconds": "--tier-p99",
    "tierBandwidth": "--tier-bandwidth",
    "prefillTokensPerSecond": "--prefill-rate",
    "decodeTokensPerSecond": "--decode-rate",
    "durationSeconds": "--duration",
    "warmupSeconds": "--warmup",
    "activeParameters": "--active-params",
    "weights": "--weights",
    "maxNumSeqs": "--max-num-seqs",
    "lruCapacityPerServer": "--lru-capacity-per-server",
    "routerWeights": "--router-weights",
    "groups": "--groups",
    "questions": "--questions",
    "prefixTokens": "--prefix-tokens",
    "questionTokens": "--question-tokens",
    "rate": "--rate",
    "stageSeconds": "--stage-seconds",
    "stagePause": "--stage-pause",
    "order": "--prompt-order",
    "prefillReferenceTokens": "--prefill-rate",
    "concurrency": "--concurrency",
    "trace": "--trace",
}
_AGENTIC = ("sessions", "tool_tokens", "think", "system_prompt", "context")
_SHARED = ("groups", "questions", "prefix_tokens", "question_tokens", "prompt_order")


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help=summary("simulate"),
        description="Discrete-event what-if of one vLLM server (or replicas sharing a disk "
        "tier) under agentic sessions: throughput, TTFT and hits per tier with tiers off, "
        "CPU only and CPU + disk, on the same seeded workload. Without flags: the study's "
        "Nemotron-Ultra-253B setup. Assumptions and sources: docs/simulator.md.",
    )
    m = p.add_argument_group("model and GPUs")
    m.add_argument("--model", help="catalog name or Hugging Face id (default: the study's)")
    m.add_argument("--params", metavar="N", help="parameters, e.g. 70e9 (needed with --model)")
    m.add_argument("--weight-bytes", metavar="B", help="bytes per parameter (default 2; FP8 1)")
    m.add_argument("--query-heads", type=int, help="attention heads (default 8 per KV head)")
    m.add_argument("--tp", type=int, help="tensor parallel size = GPUs per server (default 8)")
    m.add_argument(
        "--active-params", metavar="N", help="active parameters per token (MoE; default: known)"
    )
    m.add_argument("--weights", metavar="SIZE", help="weights in GPU memory, e.g. 64.38Gi")
    m.add_argument("--gpu-memory-utilization", metavar="FRACTION", help="vLLM's (default 0.9)")
    m.add_argument("--block-size", metavar="TOKENS", help="vLLM's --block-size (default 16)")
    m.add_argument("--max-num-seqs", metavar="N", help="vLLM's (default 256)")
    m.add_argument(
        "--offload-outputs",
        action="store_true",
        help="store output blocks in the tiers too (offload_prompt_only false)",
    )
    m.add_argument("--kv-dtype", help="auto|bfloat16|float16|fp8 (default auto)")
    m.add_argument(
        "--prefill-rate",
        metavar="TOK/S[@TOKENS]",
        help="prefill tokens/s at short context, or @TOKENS: measured on one prompt of that "
        "many tokens from an empty cache, as llm-d's calibrate.sh does (default from FLOPs)",
    )
    m.add_argument(
        "--decode-rate", metavar="TOK/S", help="one sequence's decode tokens/s (default from HBM)"
    )
    w = p.add_argument_group("workload")
    w.add_argument("--sessions", type=int, help="concurrent sessions, all replicas (default 14)")
    w.add_argument("--context", metavar="TOKENS", help="average prompt (default 50000)")
    w.add_argument("--output-tokens", metavar="TOKENS", help="mean output per turn (default 150)")
    w.add_argument(
        "--tool-tokens", metavar="TOKENS", help="mean tool result per turn (default 2000)"
    )
    w.add_argument("--system-prompt", metavar="TOKENS", help="shared system prompt (default 8000)")
    w.add_argument("--think", metavar="SECONDS", help="mean tool time between turns (default 0)")
    w.add_argument("--replicas", type=int, help="model-server replicas (default 1)")
    w.add_argument(
        "--routing",
        choices=("random", "round-robin", "sticky", "prefix"),
        help="request → replica: prefix is llm-d's prefix-aware scheduler (default random)",
    )
    w.add_argument(
        "--router-weights",
        metavar="Q,KV,P",
        help="prefix routing: queue, KV-cache and prefix scorer weights (default 2,2,3)",
    )
    w.add_argument(
        "--lru-capacity-per-server",
        metavar="BLOCKS",
        help="prefix routing: the router's index per replica, 16-token blocks (default 31250)",
    )
    s = p.add_argument_group("other workloads (instead of agentic sessions)")
    s.add_argument("--groups", metavar="N", help="shared-prefix groups (default 250)")
    s.add_argument("--questions", metavar="N", help="questions per group (default 5)")
    s.add_argument("--prefix-tokens", metavar="TOKENS", help="group prefix (default 16000)")
    s.add_argument("--question-tokens", metavar="TOKENS", help="question (default 256)")
    s.add_argument(
        "--rate",
        metavar="QPS[,QPS…]",
        help="open-loop Poisson arrivals, a stage per rate (e.g. 5,10,20,40)",
    )
    s.add_argument("--stage-seconds", metavar="SECONDS", help="each rate's stage (default 60)")
    s.add_argument(
        "--stage-pause",
        metavar="SECONDS",
        help="run stages as inference-perf does: rate × seconds requests, all answered, then "
        "this pause (its interval); default: stages back to back",
    )
    s.add_argument(
        "--prompt-order",
        choices=("uniform", "list"),
        help="uniform: each request draws a group and question (default); list: "
        "inference-perf's shuffled prompt list, from its start every stage",
    )
    s.add_argument(
        "--concurrency",
        metavar="N",
        help="closed loop: clients, instead of --rate; with --sessions, clients serving them",
    )
    s.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a JSONL trace: arrival, input/output tokens, prefix_id+prefix_tokens or "
        "hash_ids",
    )
    s.add_argument(
        "--trace-block-tokens", metavar="TOKENS", help="tokens per hash_ids entry (default 512)"
    )
    w.add_argument(
        "--restore-policy",
        choices=("always", "faster"),
        help="always: restore every hit, as vLLM does (default); faster: skip a disk restore "
        "the tier's queue makes slower than recomputing",
    )
    t = p.add_argument_group("tiers")
    t.add_argument(
        "--cpu", metavar="SIZE", help="CPU tier, cpu_bytes_to_use, or auto (default 128Gi)"
    )
    t.add_argument("--node-memory", metavar="SIZE", help="node memory (caps an auto CPU tier)")
    t.add_argument("--disk", help="nvme|cephfs|objectstore|none (default nvme)")
    t.add_argument("--tier-p99", metavar="SECONDS", help="the disk tier's fio p99 per block")
    t.add_argument("--tier-bandwidth", metavar="RATE", help="the disk tier's bandwidth, 205MB/s")
    t.add_argument("--disk-size", metavar="SIZE", help="disk tier capacity (default: sizing)")
    k = p.add_argument_group("a real tier")
    k.add_argument(
        "--tier",
        metavar="NAMESPACE/NAME",
        help="start from this KVCacheTier: its spec and the operator's measurements (probe "
        "p99 and bandwidth, t_prefill, tier sizes); flags still override",
    )
    k.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then in-cluster)")
    r = p.add_argument_group("run")
    r.add_argument("--duration", metavar="SECONDS", help="simulated time (default 3600)")
    r.add_argument("--warmup", metavar="SECONDS", help="not measured (default 600)")
    r.add_argument("--seed", type=int, help="workload seed (default 1)")
    r.add_argument(
        "--timeout",
        metavar="SECONDS",
        default="600",
        help="stop with an error after this much wall time (default 600)",
    )
    p.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    p.add_argument("--plot", metavar="FILE", help="throughput, TTFT and hits chart (.png/.svg)")
    accept_negative_values(p)  # `--cpu -1Gi` reaches --cpu's check
    p.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kvtier.simulate import simulate
    from kvtier.sizing import SizingError

    if args.plot:
        _check_plot(args.plot)  # before the run, not after it
    err = Console(file=sys.stderr)
    calibration = None
    try:
        if args.tier:
            calibration = _calibrate(args.tier, args.kubeconfig)
        config = sim_config(args, calibration.config if calibration else None)
        timeout = number(args.timeout, "--timeout")
        with _Progress(err, config.duration_seconds, len(config.scenarios), timeout) as progress:
            result = simulate(config, progress=progress.advance)
    except SizingError as exc:
        raise sizing_error(exc, _FLAGS, "simulate") from None
    doc = result.as_dict()
    if calibration is not None:
        doc["tier"] = args.tier
        doc["inputs"] = [i.as_dict() for i in calibration.inputs]
        doc["observed"] = calibration.observed
        for i in calibration.inputs:
            err.print(
                f"simulate: {i.source:>8}: {i.name} = {i.value}"
                + (f" ({i.where})" if i.where else ""),
                highlight=False,
                soft_wrap=True,
            )
    notes = warnings(result)
    if result.config.prefill_tokens_per_second is None and calibration is None:
        rate = result.derived.as_dict()["prefillTokensPerSecond"]
        notes.append(
            f"the prefill rate is assumed from FLOPs ({rate:,.0f} tokens/s) and moves the "
            "results most; give --prefill-rate from a measurement, or --tier "
            "(docs/simulator.md, sensitivity)"
        )
    if calibration is not None and calibration.assumed():
        notes.append(
            f"assumed inputs: {', '.join(calibration.assumed())}; the prefill rate and the disk "
            "tier's bandwidth move the results most (docs/simulator.md, sensitivity)"
        )
    for warning in notes:
        err.print(
            f"kvtier: warning: simulate: {warning}", style="yellow", highlight=False, soft_wrap=True
        )
    if args.output == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(result, Console(file=sys.stdout))
    if args.plot:
        from kvtier.cli.plot import draw_simulation, write_plot

        write_plot(draw_simulation, result, args.plot)
    return 0


def _calibrate(ref: str, kubeconfig: str | None) -> Calibration:
    """The KVCacheTier NAMESPACE/NAME, read from the cluster, mapped onto a simulation."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from pydantic import ValidationError
    from urllib3.exceptions import HTTPError

    from kvtier.api.tier import KVCacheTier
    from kvtier.kube.rest import Kube, load_client
    from kvtier.names import API_VERSION
    from kvtier.simulate import study_config
    from kvtier.simulate.calibrate import from_tier

    namespace, _, name = ref.partition("/")
    if not namespace or not name or "/" in name:
        raise CliError(f"simulate: --tier: {ref!r} is not NAMESPACE/NAME")
    try:
        kube = Kube(load_client(kubeconfig), timeout=10)
        obj = kube.get(API_VERSION, "KVCacheTier", name, namespace)
    except (ConfigException, OSError) as exc:
        raise CliError(f"simulate: --kubeconfig: {exc}") from None
    except (ApiException, HTTPError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise CliError(f"simulate: --tier: cannot read {ref}: {reason}", exit_code=1) from None
    if obj is None:
        raise CliError(f"simulate: --tier: no KVCacheTier {ref}")
    try:
        tier = KVCacheTier.model_validate(obj)
    except ValidationError as exc:
        raise CliError(
            f"simulate: --tier: {ref} does not parse: {exc.errors()[0]['msg']}"
        ) from None
    return from_tier(tier, study_config(), ref)


def _check_plot(path: str) -> None:
    from pathlib import Path

    from kvtier.cli.plot import check_path

    check_path(path)
    folder = Path(path).parent
    if not folder.is_dir():
        raise CliError(f"simulate: --plot: {str(folder)!r} is not a directory")


class _Progress:
    """A rich progress bar over simulated time (on a terminal only) and the wall-time bound."""

    def __init__(self, console: Console, duration: float, scenarios: int, timeout: float) -> None:
        import time

        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._clock = time.monotonic
        self._deadline = self._clock() + timeout
        self._timeout = timeout
        self._duration = duration
        self._bar = Progress(
            TextColumn("simulating {task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._task = self._bar.add_task("", total=duration * scenarios)
        self._done: dict[str, float] = {}

    def __enter__(self) -> _Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def advance(self, scenario: str, now: float) -> None:
        """Called by the engine as simulated time passes; stops a run past the bound."""
        self._done[scenario] = now
        self._bar.update(self._task, completed=sum(self._done.values()), description=scenario)
        if self._clock() > self._deadline:
            raise CliError(
                f"simulate: --timeout: stopped after {self._timeout:g} s of wall time at "
                f"{now:,.0f} of {self._duration:,.0f} simulated seconds ({scenario}); "
                "shorten --duration or raise --timeout",
                exit_code=1,
            )


def warnings(result: Simulation) -> list[str]:
    """What makes a result meaningless or fragile, said before the numbers."""
    out = []
    window = result.config.duration_seconds - result.config.warmup_seconds
    empty = [r.scenario for r in result.results if r.requests == 0]
    if empty:
        out.append(
            f"no request completed in the {window:g} s after the warm-up ({', '.join(empty)}): "
            "those figures are empty; lengthen --duration or shorten --warmup"
        )
    return out


def sim_config(args: argparse.Namespace, base: SimConfig | None = None) -> SimConfig:
    """The study's setup (or `base`, a real tier's) with every flag given applied on top.

    Every value is checked here, before the run, and an error names the flag that gave it.
    """
    from kvtier.simulate import STUDY_CEPHFS, STUDY_NVME, DiskTier, Workload, study_config
    from kvtier.simulate.models import MODEL_PARAMETERS
    from kvtier.simulate.workload import SharedPrefix, Trace
    from kvtier.sizing import find_model, normalize_disk_type, parse_bandwidth, parse_seconds

    config = base or study_config()
    changes: dict[str, Any] = {}
    if args.model:
        model = find_model(args.model).id
        known = MODEL_PARAMETERS.get(model)
        if model != config.model and not args.params and known is None:
            raise CliError("simulate: --params: give the parameter count of --model (e.g. 70e9)")
        changes["model"] = args.model
        changes["query_heads"] = None
        changes["cpu_bytes"] = None  # the study's CPU tier is Nemotron's: size this one
        if known is not None:
            changes["parameters"] = known.total
            changes["active_parameters"] = known.active
            changes["experts"] = known.experts
            changes["experts_per_token"] = known.experts_per_token
    for flag, name in (
        ("params", "parameters"),
        ("weight_bytes", "weight_bytes"),
        ("decode_rate", "decode_tokens_per_second"),
        ("duration", "duration_seconds"),
    ):
        if getattr(args, flag) is not None:
            changes[name] = number(getattr(args, flag), _flag(flag))
    if args.prefill_rate is not None:
        rate, at, tokens = args.prefill_rate.partition("@")
        changes["prefill_tokens_per_second"] = number(rate, "--prefill-rate")
        changes["prefill_reference_tokens"] = count(tokens, "--prefill-rate") if at else None
    if args.active_params is not None:
        changes["active_parameters"] = number(args.active_params, "--active-params")
    if args.weights is not None:
        changes["weights_bytes"] = size_bytes(args.weights, "--weights")
    if args.gpu_memory_utilization is not None:
        util = number(args.gpu_memory_utilization, "--gpu-memory-utilization")
        if util > 1:
            raise CliError(f"simulate: --gpu-memory-utilization: must be at most 1, got {util:g}")
        changes["gpu_memory_utilization"] = util
    for flag, name in (
        ("block_size", "block_tokens"),
        ("max_num_seqs", "max_num_seqs"),
        ("lru_capacity_per_server", "lru_capacity_per_server"),
    ):
        if getattr(args, flag) is not None:
            changes[name] = count(getattr(args, flag), _flag(flag))
    if args.router_weights is not None:
        parts = args.router_weights.split(",")
        if len(parts) != 3:
            raise CliError("simulate: --router-weights: give three weights: queue,kv,prefix")
        changes["router_weights"] = tuple(
            number(part, "--router-weights", zero=True) for part in parts
        )
    if args.offload_outputs:
        changes["offload_prompt_only"] = False
    if args.warmup is not None:
        changes["warmup_seconds"] = number(args.warmup, "--warmup", zero=True)
    for flag, name in (("query_heads", "query_heads"), ("tp", "tensor_parallel_size")):
        if getattr(args, flag) is not None:
            changes[name] = getattr(args, flag)
    if args.kv_dtype:
        changes["kv_cache_dtype"] = args.kv_dtype
    if args.replicas is not None:
        changes["replicas"] = args.replicas
    if args.routing:
        changes["routing"] = args.routing
    if args.restore_policy:
        changes["restore_policy"] = args.restore_policy
    if args.cpu is not None:
        auto = args.cpu.strip().lower() == "auto"
        changes["cpu_bytes"] = None if auto else size_bytes(args.cpu, "--cpu")
    if args.node_memory is not None:
        changes["node_memory_bytes"] = size_bytes(args.node_memory, "--node-memory")
    if args.seed is not None:
        changes["seed"] = args.seed

    disk: DiskTier | None = config.disk
    if args.disk:
        if args.disk.strip().lower() == "none":
            disk = None
            changes["scenarios"] = ("none", "cpu")
            given = [f for f in ("tier_p99", "tier_bandwidth", "disk_size") if getattr(args, f)]
            if given:
                raise CliError(
                    f"simulate: {_flag(given[0])}: sets the disk tier, but --disk is none"
                )
        else:
            kind = normalize_disk_type(args.disk, "--disk")
            disk = STUDY_CEPHFS if kind == "CephFS" else dataclasses.replace(STUDY_NVME, kind=kind)
    if disk is not None:
        if args.tier_p99 is not None:
            disk = dataclasses.replace(disk, p99_seconds=parse_seconds(args.tier_p99, "--tier-p99"))
        if args.tier_bandwidth is not None:
            disk = dataclasses.replace(
                disk,
                bandwidth_bytes_per_second=parse_bandwidth(args.tier_bandwidth, "--tier-bandwidth"),
            )
        if args.disk_size is not None:
            disk = dataclasses.replace(
                disk, capacity_bytes=size_bytes(args.disk_size, "--disk-size")
            )
    changes["disk"] = disk

    if base is not None and not any(
        getattr(args, f) is not None
        for f in (*_AGENTIC, *_SHARED, "rate", "trace", "output_tokens")
    ):
        return dataclasses.replace(config, **changes)  # the tier's own workload
    workload = changes["workload"] = _workload(args, changes)
    if not isinstance(workload, Workload):
        # Open loop: the run is the sweep (or the trace) and a drain; all of it is measured.
        if isinstance(workload, SharedPrefix) and workload.stages is not None:
            span = workload.stages.duration
            if workload.stages.waits:  # each stage is answered before the next: a drain each
                span += DRAIN_SECONDS * (len(workload.stages.rates) - 1)
        elif isinstance(workload, Trace):
            span = workload.duration
        else:
            span = None
        if span is not None:
            changes.setdefault("duration_seconds", span + DRAIN_SECONDS)
            changes.setdefault("warmup_seconds", 0.0)
    return dataclasses.replace(config, **changes)


def _workload(args: argparse.Namespace, changes: dict[str, Any]) -> Workload | SharedPrefix | Trace:
    """Agentic sessions (the default), shared-prefix groups, or a trace to replay."""
    from kvtier.simulate import Workload
    from kvtier.simulate.workload import SharedPrefix, Stages, read_trace

    agentic = [f for f in _AGENTIC if getattr(args, f) is not None]
    shared = [f for f in _SHARED if getattr(args, f) is not None]
    open_loop = [
        f for f in ("rate", "stage_seconds", "stage_pause") if getattr(args, f) is not None
    ]
    if args.trace is not None:
        clash = agentic + shared + open_loop
        if clash:
            raise CliError(f"simulate: {_flag(clash[0])}: does not apply to --trace")
        block = count(args.trace_block_tokens or "512", "--trace-block-tokens")
        return read_trace(args.trace, block)
    if shared or open_loop or (args.concurrency is not None and args.sessions is None):
        if agentic:
            raise CliError(
                f"simulate: {_flag(agentic[0])}: an agentic-session flag, but "
                f"{_flag((shared + open_loop)[0])} asks for shared-prefix groups"
            )
        if args.rate is not None and args.concurrency is not None:
            raise CliError("simulate: --concurrency: give --rate (open loop) or --concurrency")
        fields: dict[str, Any] = {}
        for flag, name in (
            ("groups", "groups"),
            ("questions", "questions"),
            ("prefix_tokens", "prefix_tokens"),
            ("question_tokens", "question_tokens"),
            ("output_tokens", "output_tokens"),
            ("concurrency", "concurrency"),
        ):
            if getattr(args, flag) is not None:
                fields[name] = count(getattr(args, flag), _flag(flag))
        if args.concurrency is None:
            rates = tuple(number(r, "--rate") for r in (args.rate or "").split(",") if r.strip())
            if not rates:
                raise CliError("simulate: --rate: give requests/s, or stages as 5,10,20,40")
            seconds = number(args.stage_seconds or "60", "--stage-seconds")
            pause = (
                None
                if args.stage_pause is None
                else number(args.stage_pause, "--stage-pause", zero=True)
            )
            fields["stages"] = Stages(rates, seconds, pause)
        elif args.stage_pause is not None:
            raise CliError("simulate: --stage-pause: stages need --rate")
        if args.prompt_order is not None:
            fields["order"] = args.prompt_order
        return SharedPrefix(**fields)
    base = Workload()
    workload: dict[str, Any] = {}
    if args.sessions is not None:
        workload["sessions"] = args.sessions
    for flag, name, zero in (
        ("context", "average_context_tokens", False),
        ("output_tokens", "output_tokens", False),
        ("tool_tokens", "tool_tokens", True),
        ("system_prompt", "system_prompt_tokens", True),
    ):
        if getattr(args, flag) is not None:
            workload[name] = count(getattr(args, flag), _flag(flag), zero=zero)
    if args.context is not None and args.system_prompt is None:
        # Keep the shared prompt a minor part of shorter contexts than the study's.
        start = dataclasses.replace(base, **workload).start_tokens
        workload["system_prompt_tokens"] = min(base.system_prompt_tokens, start // 2)
    if args.think is not None:
        workload["think_seconds"] = number(args.think, "--think", zero=True)
    if args.concurrency is not None:
        workload["concurrency"] = count(args.concurrency, "--concurrency")
    return dataclasses.replace(base, **workload)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _describe(w: Workload | SharedPrefix | Trace) -> str:
    from kvtier.simulate import Workload
    from kvtier.simulate.workload import SharedPrefix

    if isinstance(w, Workload):
        return f"{w.sessions} sessions, ~{w.average_context_tokens:,}-token prompts"
    if isinstance(w, SharedPrefix):
        load = (
            f"Poisson {','.join(f'{r:g}' for r in w.stages.rates)} req/s, "
            f"{w.stages.seconds:g} s a stage"
            if w.stages
            else f"{w.concurrency} clients"
        )
        return (
            f"{w.groups} groups × {w.questions} questions, {w.prefix_tokens:,}-token prefix + "
            f"{w.question_tokens:,}, {w.output_tokens:,} out, {load}"
        )
    return f"trace {w.source}, {len(w.requests):,} requests"


def render(result: Simulation, console: Console) -> None:
    from rich import box
    from rich.table import Table

    c = result.config
    d = result.derived
    disk = c.disk
    lines = [
        f"{c.model} at TP {c.tensor_parallel_size} on {c.tensor_parallel_size}×{c.gpu.name}, "
        f"{c.replicas} replica(s), {c.routing} routing, restore {c.restore_policy}",
        f"{_describe(c.workload)}, {c.duration_seconds - c.warmup_seconds:g} s measured after "
        f"{c.warmup_seconds:g} s warm-up, seed {c.seed}",
        f"GPU KV cache {d.gpu_kv_tokens:,} tokens, CPU tier {d.cpu_tokens:,} tokens, "
        + (
            f"{disk.kind} {d.disk_tokens:,} tokens (p99 {disk.p99_seconds:g} s, "
            f"{disk.bandwidth_bytes_per_second / 1e6:,.0f} MB/s"
            f"{', shared' if disk.shared and c.replicas > 1 else ''})"
            if disk
            else "no disk tier"
        ),
    ]
    for line in lines:
        console.print(line, soft_wrap=True)
    table = Table(
        box=box.SIMPLE,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        title="× tiers off (output tokens/s), TTFT (s), prompt tokens by source",
        title_justify="left",
    )
    table.add_column("tiers", no_wrap=True)
    for header in ("req/s", "tok/s", "×", "TTFT", "p50", "p99", "GPU", "CPU", "disk", "recomp"):
        table.add_column(header, justify="right", no_wrap=True)
    for r in result.results:
        h = r.hit_ratios
        table.add_row(
            r.scenario,
            f"{r.requests_per_second:,.3f}",
            f"{r.output_tokens_per_second:,.1f}",
            f"{r.throughput_ratio:.2f}",
            f"{r.ttft_mean:,.1f}",
            f"{r.ttft_p50:,.1f}",
            f"{r.ttft_p99:,.1f}",
            *(f"{h[k]:.0%}" for k in ("gpu", "cpu", "disk", "recompute")),
        )
    console.print(table)
    if result.results[0].stages:
        stages = Table(
            box=box.SIMPLE,
            padding=(0, 0, 0, 1),
            pad_edge=False,
            title="per stage: output tokens/s (× tiers off), mean TTFT (s)",
            title_justify="left",
        )
        stages.add_column("req/s", justify="right")
        for r in result.results:
            stages.add_column(r.scenario, justify="right", no_wrap=True)
        for i, first in enumerate(result.results[0].stages):
            cells = [f"{first['rate']:g}"]
            for r in result.results:
                st = r.stages[i]
                cells.append(
                    f"{st['outputTokensPerSecond']:,.0f} ×{st['throughputRatio']:.2f} "
                    f"{st['ttftMeanSeconds']:,.2f}"
                )
            stages.add_row(*cells)
        console.print(stages)
