"""The restore-vs-recompute figure, read through its artists: crossover labels that never
overlap, no crossover for a tier that never beats recompute, the verdict on the picture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvtier.cli.plot import draw_plan, load_matplotlib, restore_wins_above
from kvtier.sizing import SizingInput, SizingPlan, plan, resolve_geometry

# Tier → (fio p99 seconds, read bandwidth bytes/s).
Tiers = dict[str, tuple[float, int]]


def result(tiers: Tiers) -> SizingPlan:
    """Llama 3.1 70B at the study's 50K context and 60 s TTFT: t_prefill = 1.2 ms/token, a
    5 MiB block per 16 tokens; the study's 64 GiB CPU tier, too small for the working set."""
    return plan(
        SizingInput(
            geometry=resolve_geometry(model="llama-3.1-70b"),
            tensor_parallel_size=8,
            average_context_tokens=50_000,
            concurrent_sessions=64,
            baseline_ttft_seconds=60.0,
            cpu_bytes=64 * 2**30,
            tier_p99_seconds={tier: p99 for tier, (p99, _) in tiers.items()},
            tier_bandwidth_bytes_per_second={tier: rate for tier, (_, rate) in tiers.items()},
        )
    )


@pytest.fixture
def figure() -> Iterator[Any]:
    # matplotlib (the `plot` extra, which `make test` installs) is imported here, not at
    # collection: every worker collects this module, and half a second each adds up.
    load_matplotlib()
    from matplotlib import pyplot as plt

    figures: list[Any] = []

    def make(tiers: Tiers) -> Any:
        fig = draw_plan(result(tiers))
        fig.canvas.draw()
        figures.append(fig)
        return fig

    yield make
    for fig in figures:
        plt.close(fig)


def by_gid(fig: Any, kind: str, prefix: str) -> dict[str, Any]:
    """The artists of `kind` ("line": Line2D, "text": Text) whose gid starts with `prefix`."""
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    cls = {"line": Line2D, "text": Text}[kind]

    def wanted(artist: Any) -> bool:
        gid = str(artist.get_gid() or "")  # before isinstance, which narrows Any to object
        return gid.startswith(prefix) and isinstance(artist, cls)

    return {a.get_gid(): a for a in fig.findobj(wanted)}


TWO_FAST: Tiers = {"NVMe": (0.05, 3_000_000_000), "CephFS": (0.08, 1_000_000_000)}
# 205 MB/s moves a token in 1.6 ms, slower than the 1.2 ms it takes to compute it.
SLOW_CEPHFS: Tiers = {"NVMe": (0.05, 3_000_000_000), "CephFS": (0.1, 205_000_000)}


def test_small_crossovers_of_two_tiers_are_apart(figure: Any) -> None:
    fig = figure(TWO_FAST)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    labels = by_gid(fig, "text", "crossover-label-")
    assert set(labels) == {"crossover-label-NVMe", "crossover-label-CephFS"}
    boxes = [t.get_window_extent() for t in labels.values()]
    assert not boxes[0].overlaps(boxes[1]), boxes
    # Both lie well inside the axis instead of on top of each other at its left end.
    lines = by_gid(fig, "line", "crossover-")
    xs = sorted(line.get_xdata()[0] for line in lines.values())
    left, right = (ax.transData.transform((x, 1))[0] for x in xs)
    assert right - left > 20  # pixels


def test_no_crossover_for_a_tier_that_never_beats_recompute(figure: Any) -> None:
    fig = figure(SLOW_CEPHFS)
    assert set(by_gid(fig, "line", "crossover-")) == {"crossover-NVMe"}
    assert set(by_gid(fig, "text", "crossover-label-")) == {"crossover-label-NVMe"}
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "restore from CephFS (never beats recompute)" in legend


def test_the_verdict_is_on_the_picture(figure: Any) -> None:
    fig = figure(SLOW_CEPHFS)
    (verdict,) = by_gid(fig, "text", "verdict").values()
    lines = verdict.get_text().splitlines()
    assert lines[0].startswith("NVMe: restore wins at 50,000 tokens")
    # The plan's verdict per tier, whichever view decided it.
    for tier, line in zip(result(SLOW_CEPHFS).tiers, lines, strict=True):
        outcome = {True: "restore wins", False: "recompute wins", None: "no verdict"}
        assert line.startswith(f"{tier.name}: {outcome[tier.beneficial]} at 50,000 tokens"), line
    # Below the axes, so it hides no curve.
    assert verdict.get_window_extent().y1 <= fig.axes[0].get_window_extent().y0


def test_crossover_line_is_where_the_drawn_curves_meet(figure: Any) -> None:
    fig = figure(TWO_FAST)
    (ax,) = fig.axes
    recompute = next(line for line in ax.get_lines() if line.get_label().startswith("recompute"))
    restore = next(line for line in ax.get_lines() if line.get_label() == "restore from NVMe")
    (cross,) = by_gid(fig, "line", "crossover-NVMe").values()
    x = cross.get_xdata()[0]
    pairs = list(
        zip(recompute.get_xdata(), recompute.get_ydata(), restore.get_ydata(), strict=True)
    )
    assert all(r >= c for px, c, r in pairs if px < 0.8 * x)  # restore loses left of it
    assert all(r <= c for px, c, r in pairs if px > 1.5 * x)  # and wins right of it


@pytest.mark.parametrize(
    ("p99", "bandwidth", "expected"),
    [
        (0.06, None, 50),  # no bandwidth: the classic L = p99 / t_prefill
        (None, 3e9, 0),  # no latency, fast enough: wins at every length
        (0.06, 205e6, None),  # transfer slower than compute: never
    ],
)
def test_restore_wins_above(
    p99: float | None, bandwidth: float | None, expected: int | None
) -> None:
    assert restore_wins_above(p99, bandwidth, 16, 5_242_880, 0.0012) == expected
