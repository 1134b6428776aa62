"""`kvtier plan --plot`: restore time vs recompute time over context length, per disk tier.

matplotlib is the optional extra `plot` (pip install 'kvtier[plot]').
"""

from __future__ import annotations

from pathlib import Path

from kvtier.cli import CliError
from kvtier.sizing import SizingPlan, restore_seconds

FORMATS = (".png", ".svg")
_POINTS = 200


def write_plot(result: SizingPlan, path: str) -> None:
    """Draw recompute (TTFT scaled by length) and each measured tier's restore curve."""
    if Path(path).suffix.lower() not in FORMATS:
        raise CliError(f"--plot: {path!r} must end in {' or '.join(FORMATS)}")
    inp = result.input
    ttft = inp.baseline_ttft_seconds
    tiers = [
        t
        for t in result.tiers
        if t.p99_seconds is not None or t.bandwidth_bytes_per_second is not None
    ]
    if ttft is None or not tiers:
        raise CliError("--plot: needs --ttft and a --tier-p99 or --tier-bandwidth to draw")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'kvtier[plot]'", exit_code=1) from None

    context = inp.average_context_tokens
    crossovers = [t.crossover_tokens for t in tiers if t.crossover_tokens is not None]
    x_max = 2 * max([context, *crossovers])
    xs = [max(1, x_max * i // _POINTS) for i in range(_POINTS + 1)]
    prefill = ttft / context

    fig, ax = plt.subplots(figsize=(9, 5.5))
    ax.plot(xs, [prefill * x for x in xs], color="black", label="recompute (TTFT × L / context)")
    for tier in tiers:
        ys = [
            restore_seconds(
                x,
                inp.block_tokens,
                result.sizing.block_bytes,
                tier.p99_seconds,
                tier.bandwidth_bytes_per_second,
            )
            for x in xs
        ]
        (line,) = ax.plot(xs, ys, label=f"restore from {tier.name}")
        if tier.crossover_tokens is not None:
            ax.axvline(tier.crossover_tokens, color=line.get_color(), linestyle="--")
            ax.annotate(
                f"{tier.name} crossover {tier.crossover_tokens:,}",
                (tier.crossover_tokens, prefill * tier.crossover_tokens),
                textcoords="offset points",
                xytext=(6, 10),
                color=line.get_color(),
            )
    ax.axvline(context, color="grey", linestyle=":", label=f"average context {context:,}")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("seconds")
    ax.set_title(f"{inp.geometry.name}: restore vs recompute")
    ax.legend()
    fig.tight_layout()
    try:
        with open(path, "wb") as out:
            fig.savefig(out, format=Path(path).suffix.lower()[1:])
    except OSError as exc:
        raise CliError(f"--plot: cannot write {path}: {exc.strerror or exc}", exit_code=1) from None
    finally:
        plt.close(fig)
