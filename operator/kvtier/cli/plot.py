"""The --plot figures of `kvtier plan` and `kvtier simulate`, and the one writer of both.

plan: restore time vs recompute time over context length, per disk tier. Both axes are
logarithmic: crossovers of fast tiers lie at tens or hundreds of tokens, average contexts at
tens of thousands. simulate: throughput, TTFT and prompt tokens by source per scenario.
matplotlib is the optional extra `plot` (pip install 'kvtier[plot]').
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kvtier.cli.base import CliError
from kvtier.sizing import restore_seconds

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from kvtier.simulate import Simulation
    from kvtier.sizing import SizingPlan
    from kvtier.sizing.tiers import TierAssessment

Result = TypeVar("Result")

FORMATS = (".png", ".svg")
_POINTS = 200
_LABEL_TOP = 0.62  # crossover labels stack down from here (axes fraction), one row each
_LABEL_STEP = 0.08


def restore_wins_above(
    p99_seconds: float | None,
    bandwidth: float | None,
    block_tokens: int,
    block_bytes: int,
    prefill_seconds_per_token: float,
) -> int | None:
    """The context length from which the drawn restore curve (p99 + transfer at the
    bandwidth) stays below recompute (t_prefill × length); 0 when restore always wins,
    None when it never does (moving a token takes longer than computing it)."""
    per_token = block_bytes / block_tokens / bandwidth if bandwidth else 0.0
    margin = prefill_seconds_per_token - per_token
    if margin <= 0:
        return None
    return math.ceil((p99_seconds or 0.0) / margin)


def _prefill(result: SizingPlan, tier: TierAssessment) -> float:
    if tier.latency is not None:
        return tier.latency.prefill_seconds_per_token
    ttft = result.input.baseline_ttft_seconds or 0.0
    return ttft / result.input.average_context_tokens


def verdict_line(tier: TierAssessment, context: int) -> str:
    """The sizing verdict for one tier at the average context, for the figure's foot."""
    if tier.beneficial is None:
        return f"{tier.name}: no verdict at {context:,} tokens ({tier.reason.split(':')[0]})"
    outcome = "restore wins" if tier.beneficial else "recompute wins"
    view = f" ({tier.decided_by} view)" if tier.decided_by in ("latency", "throughput") else ""
    return f"{tier.name}: {outcome} at {context:,} tokens{view}"


def draw_plan(result: SizingPlan) -> Figure:
    """The figure: recompute, each measured tier's restore curve, the lengths above which
    restore wins (only for tiers where it ever does) and the verdict per tier."""
    inp = result.input
    ttft = inp.baseline_ttft_seconds
    tiers = [
        t
        for t in result.tiers
        if t.p99_seconds is not None or t.bandwidth_bytes_per_second is not None
    ]
    if ttft is None or not tiers:
        raise CliError("--plot: needs --ttft and a --tier-p99 or --tier-bandwidth to draw")
    load_matplotlib()
    import matplotlib.pyplot as plt

    context = inp.average_context_tokens
    block_bytes = result.sizing.block_bytes
    wins = {
        t.name: restore_wins_above(
            t.p99_seconds,
            t.bandwidth_bytes_per_second,
            inp.block_tokens,
            block_bytes,
            _prefill(result, t),
        )
        for t in tiers
    }
    x_min = inp.block_tokens
    x_max = 2 * max([context, *(w for w in wins.values() if w)])
    ratio = x_max / x_min
    xs = [round(x_min * ratio ** (i / _POINTS)) for i in range(_POINTS + 1)]
    prefill = ttft / context

    fig, ax = plt.subplots(figsize=(9, 6))
    ax.set_xscale("log")
    ax.set_yscale("log")  # sub-second restores and minute-long prefills on one picture
    ax.plot(xs, [prefill * x for x in xs], color="black", label="recompute (TTFT × L / context)")
    row = 0
    for tier in tiers:
        ys = [
            restore_seconds(
                x, inp.block_tokens, block_bytes, tier.p99_seconds, tier.bandwidth_bytes_per_second
            )
            for x in xs
        ]
        above = wins[tier.name]
        if above is None:
            label = f"restore from {tier.name} (never beats recompute)"
        elif above <= x_min:
            label = f"restore from {tier.name} (wins at every length)"
        else:
            label = f"restore from {tier.name}"
        (line,) = ax.plot(xs, ys, label=label)
        if above is None or above <= x_min:
            continue
        color = line.get_color()
        ax.axvline(above, color=color, linestyle="--", gid=f"crossover-{tier.name}")
        # x in data, y in axes fraction; one row per label, so two never overlap.
        ax.text(
            above,
            _LABEL_TOP - _LABEL_STEP * row,
            f" {tier.name}: restore wins above {above:,} tokens",
            transform=ax.get_xaxis_transform(),
            color=color,
            gid=f"crossover-label-{tier.name}",
        )
        row += 1
    ax.axvline(context, color="grey", linestyle=":", label=f"average context {context:,}")
    ax.set_xlim(x_min, x_max)
    ax.set_xlabel("context length (tokens, log scale)")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(f"{inp.geometry.name}: restore vs recompute")
    ax.legend(loc="upper left")
    lines = [verdict_line(t, context) for t in tiers]
    foot = 0.03 + 0.035 * len(lines)
    fig.text(0.01, 0.01, "\n".join(lines), va="bottom", fontsize=9, gid="verdict")
    fig.tight_layout(rect=(0, foot, 1, 1))
    return fig


def draw_simulation(result: Simulation) -> Figure:
    """Three panels: throughput against tiers off, TTFT, and where prompt tokens came from."""
    load_matplotlib()
    import matplotlib.pyplot as plt

    names = [r.scenario for r in result.results]
    fig, (speed, ttft, hits) = plt.subplots(1, 3, figsize=(13, 4.5))
    speed.bar(names, [r.throughput_ratio for r in result.results], color="tab:blue")
    speed.set_title("throughput × tiers off")
    ttft.bar(names, [r.ttft_mean for r in result.results], color="tab:orange", label="mean")
    ttft.plot(names, [r.ttft_p99 for r in result.results], "k^", label="p99")
    ttft.set_title("TTFT (s)")
    ttft.legend()
    bottom = [0.0] * len(names)
    for tier in ("gpu", "cpu", "disk", "recompute"):
        shares = [r.hit_ratios[tier] for r in result.results]
        hits.bar(names, shares, bottom=bottom, label=tier)
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    hits.set_title("prompt tokens by source")
    hits.legend()
    fig.suptitle(result.config.model)
    fig.tight_layout()
    return fig


def check_path(path: str) -> None:
    """CliError unless `path` ends in one of FORMATS (before a long run, not after it)."""
    if Path(path).suffix.lower() not in FORMATS:
        raise CliError(f"--plot: {path!r} must end in {' or '.join(FORMATS)}")


def load_matplotlib() -> None:
    """Import matplotlib.pyplot drawing to files only, or CliError when the extra is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a display
        import matplotlib.pyplot
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'kvtier[plot]'", exit_code=1) from None


def write_plot(draw: Callable[[Result], Figure], result: Result, path: str) -> None:
    """Draw `result` with `draw` into `path` (.png or .svg, the format its suffix names)."""
    check_path(path)
    fig = draw(result)
    import matplotlib.pyplot as plt  # draw loaded it

    try:
        with open(path, "wb") as out:
            fig.savefig(out, format=Path(path).suffix.lower()[1:])
    except OSError as exc:
        raise CliError(f"--plot: cannot write {path}: {exc.strerror or exc}", exit_code=1) from None
    finally:
        plt.close(fig)
