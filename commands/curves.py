"""A run's accuracy over its seeds as one curve: the mean, and one standard deviation as a band.

Against rounds, the seeds are averaged round by round (up to the shortest run). Against virtual
time or bytes each seed reaches a round at its own x, so the seeds are first interpolated
linearly (``numpy.interp``) onto one grid: every x that any seed recorded, inside the range
that all seeds cover (no seed is extended past its own first or last round). The sd is the
sample sd over seeds (n - 1, as the comparison table's), zero with one seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from server import figure_style

Rows = Sequence[Mapping[str, Any]]


def _rounds(rows: Rows) -> list[float]:
    return [float(r["round"]) for r in rows]


def _virtual_s(rows: Rows) -> list[float]:
    return [float(r["virtual_time_s"]) for r in rows]


def _megabytes(rows: Rows) -> list[float]:
    sent = np.cumsum([int(r["bytes_up"]) + int(r["bytes_down"]) for r in rows])
    return [float(v) / 1e6 for v in sent]


@dataclass(frozen=True)
class XAxis:
    label: str
    of: Callable[[Rows], list[float]]
    interpolated: bool  # False: the seeds share their x (rounds)
    log: bool = False


X_AXES = {
    "rounds": XAxis("round", _rounds, interpolated=False),
    "virtual_time_s": XAxis("virtual time (s)", _virtual_s, interpolated=True),
    "megabytes": XAxis("MB sent, both ways (log)", _megabytes, interpolated=True, log=True),
}


@dataclass(frozen=True)
class Curve:
    name: str
    method: str
    x: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    seeds: int


def curve(name: str, method: str, runs: Sequence[Rows], x_axis: str) -> Curve:
    """``runs``: the records of one run name, one per seed."""
    if not runs or not all(runs):
        raise ValueError(f"{name}: a seed without rounds")
    axis = X_AXES[x_axis]
    accuracy = [np.array([float(r["accuracy"]) for r in rows]) for rows in runs]
    xs = [np.array(axis.of(rows)) for rows in runs]
    if axis.interpolated and len(runs) > 1:
        low, high = max(x[0] for x in xs), min(x[-1] for x in xs)
        grid = np.unique(np.concatenate(xs))
        grid = grid[(grid >= low) & (grid <= high)]
        ys = np.array([np.interp(grid, x, y) for x, y in zip(xs, accuracy, strict=True)])
    else:
        length = min(len(y) for y in accuracy)
        grid = xs[0][:length]
        ys = np.array([y[:length] for y in accuracy])
    sd = ys.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(grid))
    return Curve(name, method, grid, ys.mean(axis=0), sd, len(runs))


def draw(ax: Axes, curves: Sequence[Curve], x_axis: str) -> None:
    """Each curve in its method's colour (runs of one method in different line styles), its
    band under it, labelled with its name."""
    axis = X_AXES[x_axis]
    seen: dict[str, int] = {}
    for c in curves:
        colour = figure_style.colour_of(c.method)
        k = seen[c.method] = seen.get(c.method, -1) + 1
        styles, markers = figure_style.LINE_STYLES, figure_style.MARKERS
        ax.plot(
            c.x,
            c.mean,
            label=c.name,
            color=colour,
            linestyle=styles[k % len(styles)],
            marker=markers[k // len(styles) % len(markers)],
            markevery=max(1, len(c.x) // 12),
            markersize=4,
            linewidth=1.2,
        )
        if c.seeds > 1:
            ax.fill_between(
                c.x,
                c.mean - c.sd,
                c.mean + c.sd,
                color=colour,
                alpha=figure_style.BAND_ALPHA,
                linewidth=0,
            )
    ax.set_xlabel(axis.label)
    if axis.log:
        ax.set_xscale("log")
    if not axis.interpolated:
        figure_style.integer_ticks(ax.xaxis)
    seeds = sorted({c.seeds for c in curves})
    spread = "" if seeds == [1] else f", mean ± sd over {'/'.join(map(str, seeds))} seeds"
    ax.set_ylabel(f"test accuracy{spread}")
    ax.set_ylim(0.0, 1.0)
    ax.grid(True, alpha=0.3)
    # beside the axes, clear of every curve and band
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
