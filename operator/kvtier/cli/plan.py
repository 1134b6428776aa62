"""`kvtier plan` and `kvtier models`: the sizing engine on the command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from kvtier.cli.args import size_bytes, sizing_error
from kvtier.cli.base import CliError
from kvtier.cli.commands import summary
from kvtier.sizing import (
    DISK_TYPES,
    KV_DTYPES,
    SizingError,
    SizingInput,
    SizingPlan,
    bytes_per_token,
    human_bytes,
    kv_transfer_config_arg,
    load_catalog,
    normalize_disk_type,
    parse_bandwidth,
    parse_count,
    parse_geometry,
    parse_seconds,
    plan,
    resolve_geometry,
    resolve_kv_dtype,
)
from kvtier.sizing.record import field_defaults, replace

# typing only for annotations: `kvtier plan` starts without importing it (bench/startup.py;
# mypy treats any name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Console
    from rich.text import Text

    from kvtier.cli.base import Subparsers

# rich, yaml and the probe reader load only when a command needs them (fast start-up).

OUTPUTS = ("table", "json", "yaml")
# SizingError.field → the flag that set it, so errors name what the user typed.
_FLAGS = {
    "model": "--model",
    "config.json": "--config",
    "geometry": "--geometry",
    "attentionLayers": "--geometry",
    "kvHeads": "--geometry",
    "headDim": "--geometry",
    "tensorParallelSize": "--tp",
    "kvCacheDtype": "--kv-dtype",
    "blockSizeTokens": "--block-tokens",
    "averageContextTokens": "--context",
    "concurrentSessions": "--sessions",
    "replicas": "--replicas",
    "cpu.size": "--cpu",
    "nodeMemoryBytes": "--node-memory",
    "modelServerPodsPerNode": "--pods-per-node",
    "maxNodeMemoryFraction": "--max-node-fraction",
    "memoryOverheadFactor": "--memory-overhead",
    "headroomBytes": "--headroom",
    "disk.type": "--disk",
    "availableDiskTypes": "--disks",
    "evictionPolicy": "--eviction-policy",
    "baselineTTFTSeconds": "--ttft",
    "prefillSecondsPerToken": "--prefill-time",
    "tierP99Seconds": "--tier-p99",
    "tierBandwidth": "--tier-bandwidth",
    "gpuKVCacheBytes": "--gpu-kv-cache",
    "gpuMemoryBytes": "--gpu-memory",
    "modelWeightsBytes": "--weights",
    "vllmVersion": "--vllm-version",
    "gpuBlockSizeTokens": "--gpu-block-tokens",
    "dataParallelSize": "--data-parallel-size",
    "maxModelLen": "--max-model-len",
    "disk.objectStore": "--object-store-bucket/--object-store-endpoint",
}


def register(subparsers: Subparsers) -> None:
    _add_plan(subparsers)
    models = subparsers.add_parser("models", help=summary("models"))
    models.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    models.set_defaults(handler=run_models)


def _default(name: str) -> Any:
    return field_defaults(SizingInput)[name]


def _add_plan(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help=summary("plan"),
        description="Size CPU and disk KV-cache tiers for a vLLM server. Sizes take Kubernetes "
        "quantities (64Gi, 64G) or plain bytes; token counts take plain numbers or 128Ki.",
    )
    model = p.add_argument_group("model")
    source = model.add_mutually_exclusive_group()
    source.add_argument("--model", help="catalog name or Hugging Face id (see `kvtier models`)")
    source.add_argument("--config", metavar="CONFIG.JSON", help="a Hugging Face config.json")
    model.add_argument(
        "--geometry", metavar="L,H,D", help="attention layers, KV heads, head dim (overrides)"
    )
    model.add_argument("--name", help="model name to show with --config or --geometry")
    model.add_argument("--tp", type=int, default=1, help="tensor parallel size (default 1)")
    model.add_argument("--kv-dtype", default="auto", help=f"{'|'.join(KV_DTYPES)} (default auto)")
    model.add_argument("--block-tokens", type=int, default=_default("block_tokens"))

    server = p.add_argument_group("vLLM server")
    server.add_argument(
        "--vllm-version",
        default=_default("vllm_version"),
        help=f"serving vLLM release (default {_default('vllm_version')}, the study's)",
    )
    server.add_argument(
        "--gpu-block-tokens",
        type=int,
        default=_default("gpu_block_tokens"),
        help="the attention backend's GPU block, vLLM --block-size (default 16)",
    )
    server.add_argument(
        "--hybrid-kv-cache-manager",
        choices=("on", "off"),
        default="on",
        help="off: the server runs with --disable-hybrid-kv-cache-manager (default on)",
    )
    server.add_argument(
        "--data-parallel-size",
        type=int,
        default=_default("data_parallel_size"),
        help="engines per pod, each with its own CPU tier (default 1)",
    )
    server.add_argument("--max-model-len", type=int, help="the server's --max-model-len")

    work = p.add_argument_group("workload")
    work.add_argument("--context", required=True, metavar="TOKENS", help="average context")
    work.add_argument("--sessions", type=int, default=1, help="concurrent sessions, all replicas")
    work.add_argument("--replicas", type=int, default=1)

    cpu = p.add_argument_group("CPU tier")
    cpu.add_argument("--cpu", default="auto", metavar="SIZE", help="auto or a size (default auto)")
    cpu.add_argument("--node-memory", metavar="SIZE", help="node allocatable memory (caps auto)")
    cpu.add_argument("--pods-per-node", type=int, help="model-server pods sharing a node")
    cpu.add_argument(
        "--max-node-fraction",
        type=float,
        help=f"node memory share for CPU tiers (default {_default('max_node_memory_fraction')})",
    )
    cpu.add_argument(
        "--memory-overhead",
        type=float,
        help=f"pod memory per CPU-tier byte (default {_default('memory_overhead_factor')})",
    )
    cpu.add_argument(
        "--headroom",
        metavar="SIZE",
        help=f"extra pod memory (default {human_bytes(_default('headroom_bytes'))})",
    )
    cpu.add_argument("--gpu-kv-cache", metavar="SIZE", help="GPU KV cache size of one server")
    cpu.add_argument("--gpu-memory", metavar="SIZE", help="HBM per GPU (estimates GPU KV cache)")
    cpu.add_argument("--weights", metavar="SIZE", help="model weights (estimates GPU KV cache)")

    disk = p.add_argument_group("disk tiers")
    disk.add_argument("--disk", default="auto", help="auto|none|nvme|cephfs|objectstore")
    disk.add_argument(
        "--disks", default="nvme,cephfs", help="available disk types (default nvme,cephfs)"
    )
    disk.add_argument("--eviction-policy", choices=("lru", "arc"))
    disk.add_argument(
        "--fs-root-dir", help=f"fs tier directory (default {_default('fs_root_dir')})"
    )
    disk.add_argument("--object-store-bucket", metavar="BUCKET", help="the obj tier's bucket")
    disk.add_argument(
        "--object-store-endpoint", metavar="URL", help="the obj tier's endpoint, https://host"
    )
    disk.add_argument("--ttft", metavar="SECONDS", help="baseline TTFT, offload off")
    disk.add_argument(
        "--prefill-time",
        metavar="SECONDS",
        help="measured prefill compute seconds per token (preferred to TTFT ÷ context)",
    )
    disk.add_argument(
        "--tier-p99", action="append", default=[], metavar="TIER=SECONDS", help="fio p99"
    )
    disk.add_argument(
        "--tier-bandwidth", action="append", default=[], metavar="TIER=RATE", help="e.g. 205MB/s"
    )
    disk.add_argument(
        "--probe-result",
        action="append",
        default=[],
        metavar="[TIER=]FILE",
        help="a `kvtier probe` result (or fio's JSON report): its p99 and read bandwidth for "
        "TIER, or for the selected disk tier when no TIER is given; --tier-p99 and "
        "--tier-bandwidth override it",
    )

    p.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    p.add_argument("--plot", metavar="FILE", help="restore vs recompute chart (.png or .svg)")
    p.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from kvtier.sizing.sanity import input_warnings

    try:
        inp = sizing_input(args)
        result = plan(inp)
    except SizingError as exc:
        raise sizing_error(exc, _FLAGS) from None
    result = replace(result, warnings=(*input_warnings(inp), *result.warnings))
    if args.plot:
        from kvtier.cli.plot import draw_plan, write_plot  # matplotlib is an optional extra

        write_plot(draw_plan, result, args.plot)
    _emit(result.as_dict(), args.output, render_plan, result)
    return 0


def sizing_input(args: argparse.Namespace) -> SizingInput:
    """Command-line flags → SizingInput; unset tunables keep SizingInput's defaults."""
    geometry = resolve_geometry(
        model=args.model,
        config=args.config,
        geometry=parse_geometry(args.geometry) if args.geometry else None,
    )
    if args.name:
        geometry = replace(geometry, name=args.name)
    kwargs: dict[str, Any] = {
        "geometry": geometry,
        "average_context_tokens": parse_count(args.context, "--context"),
        "concurrent_sessions": args.sessions,
        "replicas": args.replicas,
        "tensor_parallel_size": args.tp,
        "kv_cache_dtype": args.kv_dtype,
        "block_tokens": args.block_tokens,
        "vllm_version": args.vllm_version,
        "gpu_block_tokens": args.gpu_block_tokens,
        "hybrid_kv_cache_manager": args.hybrid_kv_cache_manager == "on",
        "data_parallel_size": args.data_parallel_size,
        "max_model_len": args.max_model_len,
        "tier_p99_seconds": _per_tier(args.tier_p99, "--tier-p99", parse_seconds),
        "tier_bandwidth_bytes_per_second": _per_tier(
            args.tier_bandwidth, "--tier-bandwidth", parse_bandwidth
        ),
        "disk_type": _disk_choice(args.disk),
        "available_disk_types": frozenset(
            normalize_disk_type(d, "--disks") for d in args.disks.split(",") if d.strip()
        ),
    }
    if args.cpu.strip().lower() != "auto":
        kwargs["cpu_bytes"] = size_bytes(args.cpu, "--cpu")
    optional: dict[str, tuple[str, Any]] = {
        "node_memory_bytes": ("--node-memory", size_bytes),
        "headroom_bytes": ("--headroom", size_bytes),
        "gpu_kv_cache_bytes": ("--gpu-kv-cache", size_bytes),
        "gpu_memory_bytes": ("--gpu-memory", size_bytes),
        "model_weights_bytes": ("--weights", size_bytes),
        "baseline_ttft_seconds": ("--ttft", parse_seconds),
        "prefill_seconds_per_token": ("--prefill-time", parse_seconds),
    }
    for name, (flag, parse) in optional.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            kwargs[name] = parse(value, flag)
    for name, attr in (
        ("model_server_pods_per_node", "pods_per_node"),
        ("max_node_memory_fraction", "max_node_fraction"),
        ("memory_overhead_factor", "memory_overhead"),
        ("eviction_policy", "eviction_policy"),
        ("fs_root_dir", "fs_root_dir"),
        ("object_store_bucket", "object_store_bucket"),
        ("object_store_endpoint", "object_store_endpoint"),
    ):
        if getattr(args, attr) is not None:
            kwargs[name] = getattr(args, attr)
    return _with_probe_results(SizingInput(**kwargs), args.probe_result)


def _with_probe_results(inp: SizingInput, items: list[str]) -> SizingInput:
    """Fill tier p99 and bandwidth from probe result files; explicit flags keep precedence."""
    if not items:
        return inp
    p99: dict[str, float] = {}
    bandwidth: dict[str, float] = {}
    for item in items:
        tier_text, sep, rest = item.partition("=")
        tier, path = None, item
        if sep:
            # Otherwise no TIER= prefix, just a file name that contains "=".
            with contextlib.suppress(SizingError):
                tier, path = normalize_disk_type(tier_text, "--probe-result"), rest
        tier = tier or _selected_disk(inp, path)
        result = _read_probe_result(path)
        p99[tier] = result["p99Seconds"]
        bandwidth[tier] = result["bandwidthBytesPerSecond"]
        if result.get("buffered"):
            print(
                f"kvtier: warning: {path}: {tier} was probed with buffered I/O (O_DIRECT "
                "refused): its latencies are optimistic",
                file=sys.stderr,
            )
    return replace(
        inp,
        tier_p99_seconds={**p99, **inp.tier_p99_seconds},
        tier_bandwidth_bytes_per_second={**bandwidth, **inp.tier_bandwidth_bytes_per_second},
    )


def _read_probe_result(path: str) -> dict[str, Any]:
    """A `kvtier probe` result or fio's JSON report; anything else is named as such."""
    from kvtier.probe import ProbeError, read_probe_result
    from kvtier.textfile import TextFileError, read_text_file

    try:
        text = read_text_file(path)
    except TextFileError as exc:
        raise CliError(f"--probe-result: {exc}") from None
    if '"fio version"' not in text:
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        if not isinstance(document, dict) or not (_PROBE_KEYS & document.keys()):
            raise CliError(
                f"--probe-result {path}: not a `kvtier probe` result or fio's JSON report "
                "(`kvtier probe` prints one JSON object with p99Seconds; fio needs "
                "--output-format=json)"
            )
    try:
        return read_probe_result(text)
    except (ProbeError, ValueError) as exc:
        raise CliError(f"--probe-result {path}: {exc}") from None


# A probe result has these (or "error", when the probe failed).
_PROBE_KEYS = {"error", "p99Seconds", "bandwidthBytesPerSecond", "measuredAt", "p50Seconds"}


def _selected_disk(inp: SizingInput, path: str) -> str:
    """The disk tier a bare --probe-result FILE is for: --disk, else what the plan picks."""
    disk = inp.disk_type if inp.disk_type in DISK_TYPES else plan(inp).disk
    if disk is None:
        raise CliError(
            f"--probe-result {path}: no disk tier is selected (--disk {inp.disk_type}); "
            "name one, e.g. nvme=FILE"
        )
    return disk


def _disk_choice(text: str) -> str:
    lowered = text.strip().lower()
    if lowered in ("auto", "none"):
        return lowered.capitalize()
    return normalize_disk_type(text, "--disk")


def _per_tier(items: list[str], flag: str, parse: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in items:
        tier, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"{flag}: {item!r} is not TIER=VALUE (tiers: {', '.join(DISK_TYPES)})")
        values[normalize_disk_type(tier, flag)] = parse(value, flag)
    return values


def run_models(args: argparse.Namespace) -> int:
    rows = []
    for entry in load_catalog():
        g = entry.geometry
        dtype_bytes = resolve_kv_dtype("auto", g.model_dtype)[1]
        per_token = bytes_per_token(g, 1, dtype_bytes)
        rows.append(
            {
                "id": entry.id,
                "short": entry.short,
                "aliases": list(entry.aliases),
                "attentionLayers": g.attention_layers,
                "totalLayers": g.total_layers,
                "kvHeads": g.kv_heads,
                "headDim": g.head_dim,
                "latentAttention": g.latent_attention,
                "modelDtype": g.model_dtype,
                "bytesPerToken": per_token,
                "blockBytes": per_token * _default("block_tokens"),
            }
        )
    _emit({"models": rows}, args.output, render_models, rows)
    return 0


def _emit(document: dict[str, Any], output: str, render: Any, subject: Any) -> None:
    if output == "json":
        print(json.dumps(document, indent=2, ensure_ascii=False))
    elif output == "yaml":
        import yaml

        print(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), end="")
    else:
        from rich.console import Console

        render(subject, Console(file=sys.stdout))


def render_models(rows: list[dict[str, Any]], console: Console) -> None:
    """The catalog; a Hugging Face id too wide for the terminal breaks after its org/, never
    inside a name (rich folds a word that does not fit anywhere)."""
    table = _models_table(rows, split_org=False)
    unbounded = console.options.update(width=10_000, max_width=10_000)
    if console.measure(table, options=unbounded).maximum > console.width:
        table = _models_table(rows, split_org=True)
    console.print(table)


def _models_table(rows: list[dict[str, Any]], *, split_org: bool) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title="kvtier model catalog (16-bit KV, whole server at TP 1)", box=box.SIMPLE)
    table.add_column("model / short name", no_wrap=True)
    for column in ("layers", "KV", "dim", "B/token", "block"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        layers = str(row["attentionLayers"])
        if row["totalLayers"] != row["attentionLayers"]:
            layers += f"/{row['totalLayers']}"
        model_id = row["id"]
        if split_org and "/" in model_id:
            org, name = model_id.split("/", 1)
            model_id = f"{org}/\n{name}"
        table.add_row(
            Text(model_id).append(f"\n{row['short']}", style="dim"),
            layers,
            "MLA" if row["latentAttention"] else str(row["kvHeads"]),
            str(row["headDim"]),
            f"{row['bytesPerToken']:,}",
            f"{row['blockBytes']:,}",
        )
    return table


def render_plan(result: SizingPlan, console: Console) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    d = result.as_dict()
    m, s, why = d["model"], d["sizing"], d["decisions"]
    heads = "MLA latent" if m["latentAttention"] else f"{m['kvHeads']} KV heads"
    v = d["vllm"]
    console.print(
        Text(
            f"{m['name']} ({m['source']}): {m['attentionLayers']} attention layers × {heads} × "
            f"{m['headDim']} head dim, {m['kvCacheDtype']} KV, TP {m['tensorParallelSize']}",
            style="bold",
        )
    )
    console.print(
        Text(
            f"vLLM {v['version']} (sized as release {v['release']}): GPU block "
            f"{v['gpuBlockSizeTokens']} tokens, hybrid KV cache manager "
            f"{'on' if v['hybridKVCacheManager'] else 'off'}, {v['dataParallelSize']} "
            "engine(s) per pod; blockBytes, contextBytes, cpuChunks and shmBytes depend on "
            "the release",
            style="dim",
        )
    )
    # Two columns read well at any width: the figure, then one dim line saying why.
    table = Table(title="Sizing", title_justify="left", show_header=False, box=box.SIMPLE)
    table.add_column("field", style="cyan", no_wrap=True)
    table.add_column("value")
    rows: list[tuple[str, str, str]] = [
        ("kvCacheDtype", m["kvCacheDtype"], f"{m['kvBytesPerElement']} B per element"),
        ("bytesPerTokenPerRank", *_bytes(s["bytesPerTokenPerRank"])),
        ("bytesPerToken", *_bytes(s["bytesPerToken"])),
        ("blockBytes", *_bytes(s["blockBytes"])),
        ("contextBytes", *_bytes(s["contextBytes"])),
        ("workingSetBytes", *_bytes(s["workingSetBytes"])),
        ("workingSetBytesAllReplicas", *_bytes(s["workingSetBytesAllReplicas"])),
        ("cpuBytesToUse", *_bytes(s["cpuBytesToUse"])),
        ("cpuChunks", f"{s['cpuChunks']:,}", "chunks"),
        ("fitsInCPU", str(s["fitsInCPU"]).lower(), ""),
        ("contextsInCPU", f"{s['contextsInCPU']:g}", "average contexts"),
        ("podMemoryBytes", *_bytes(s["podMemoryBytes"])),
        ("shmBytes", *(_bytes(s["shmBytes"]) if s["shmBytes"] is not None else ("none", ""))),
        ("topology", s["topology"], ""),
        ("diskBytes", *(_bytes(s["diskBytes"]) if s["diskBytes"] is not None else ("none", ""))),
    ]
    for name, value, human in rows:
        table.add_row(name, _cell(value, human, why.get(name, "")))
    console.print(table)

    if result.tiers:
        tiers = Table(
            title="Disk tiers: restore vs recompute (* selected)",
            title_justify="left",
            show_header=False,
            box=box.SIMPLE,
        )
        tiers.add_column("tier", style="cyan", no_wrap=True)
        tiers.add_column("verdict")
        for t in result.tiers:
            figures = [
                f"p99 {t.p99_seconds:g} s" if t.p99_seconds is not None else "",
                _bandwidth(t.bandwidth_bytes_per_second, t.restore_blocks_per_second),
                f"crossover {t.crossover_tokens:,} tokens"
                if t.crossover_tokens is not None
                else "",
                f"restore {t.restore_seconds:g} s" if t.restore_seconds is not None else "",
                f"recompute {t.recompute_seconds:g} s" if t.recompute_seconds is not None else "",
                f"decided by {t.decided_by} view" if t.decided_by else "",
            ]
            verdict = "unknown" if t.beneficial is None else str(t.beneficial).lower()
            tiers.add_row(
                t.name + (" *" if t.selected else ""),
                _cell(f"beneficial: {verdict}", " · ".join(f for f in figures if f), t.reason),
            )
        console.print(tiers)

    console.print(Text("fio probe", style="bold"), Text(f"({why['fioBlockSize']})", style="dim"))
    console.print(Text(d["fioCommand"]), soft_wrap=True)
    console.print(Text("vLLM", style="bold"))
    arg = kv_transfer_config_arg(d["kvTransferConfig"])
    console.print(Text(f"--kv-transfer-config '{arg}'"), soft_wrap=True)
    for warning in d["warnings"]:
        console.print(Text(f"warning: {warning}", style="yellow"))


def _bytes(n: int) -> tuple[str, str]:
    return f"{n:,}", human_bytes(n)


def _cell(value: str, detail: str, why: str) -> Text:
    from rich.text import Text

    text = Text(value, style="bold")
    if detail:
        text.append(f"  {detail}")
    if why:
        text.append(f"\n{why}", style="dim")
    return text


def _bandwidth(bandwidth: float | None, blocks_per_second: float | None) -> str:
    if bandwidth is None:
        return ""
    return f"{bandwidth / 1e6:g} MB/s = {blocks_per_second:g} blocks/s"
