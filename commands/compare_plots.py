"""The comparison's plots: accuracy against virtual time and against bytes (mean and one sd
over seeds: commands/curves.py), the ratio and collective chosen per round next to the link
schedule, and communication time against the number of clients for runs named
``<group>-n<N>``. Each as PNG with an SVG beside it (server/figure_style.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from commands import curves  # noqa: E402
from commands.plot_ratio_schedule import client0_links, draw_links, scatter_ratios  # noqa: E402
from server import figure_style  # noqa: E402

Rows = Sequence[Mapping[str, Any]]


# One figure per x axis: its file name and the axis (commands/curves.py)
ACCURACY_FIGURES = {
    "accuracy_vs_time.png": "virtual_time_s",
    "accuracy_vs_bytes.png": "megabytes",
}


def plot_accuracy(
    records: Mapping[str, Sequence[Rows]],
    methods: Mapping[str, str],
    out: Path,
    *,
    x_axis: str,
    title: str,
) -> list[Path]:
    """:func:`accuracy_figure` written to ``out`` (PNG) and an SVG beside it."""
    fig = accuracy_figure(records, methods, x_axis=x_axis, title=title)
    written = figure_style.save(fig, out)
    plt.close(fig)
    return written


def accuracy_figure(
    records: Mapping[str, Sequence[Rows]],
    methods: Mapping[str, str],
    *,
    x_axis: str,
    title: str,
) -> Figure:
    """One curve per run name (``records``: name -> one list of rows per seed): the mean over
    its seeds and a band of one sd, in the colour of its method (``methods``: name -> method),
    labelled with the name."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    curves.draw(
        ax,
        [curves.curve(name, methods[name], runs, x_axis) for name, runs in records.items()],
        x_axis,
    )
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_accuracies(
    records: Mapping[str, Sequence[Rows]],
    configs: Mapping[str, Mapping[str, Any]],
    out: Path,
    *,
    title: str,
) -> list[Path]:
    """Accuracy against virtual time and against bytes in ``out`` (a comparison's folder)."""
    methods = {name: figure_style.method_of(config) for name, config in configs.items()}
    return [
        path
        for file, x_axis in ACCURACY_FIGURES.items()
        for path in plot_accuracy(records, methods, out / file, x_axis=x_axis, title=title)
    ]


def _adapts(rows: Rows) -> bool:
    """A run whose ratio or collective changes over the rounds."""
    return len({(r["compression_ratio"], r["collective"]) for r in rows}) > 1


def plot_ratio_schedule(
    records: Mapping[str, Sequence[Rows]], configs: Mapping[str, Mapping[str, Any]], out: Path
) -> Path | None:
    """Per adapting run (first seed): c per round coloured by collective; below, the link
    schedule (latency and bandwidth of client 0) of the longest such run's network."""
    adapting = [name for name, runs in records.items() if _adapts(runs[0])]
    if not adapting:
        return None
    fig, axes = plt.subplots(
        len(adapting) + 1, 1, figsize=(8, 2.2 * (len(adapting) + 1)), sharex=True
    )
    for ax, name in zip(axes, adapting, strict=False):
        rows = records[name][0]
        scatter_ratios(ax, rows, size=6)
        ax.set_yscale("log")
        ax.set_ylabel("c")
        ax.set_title(name, fontsize=9)
        ax.legend(loc="upper right", fontsize=7)
    longest = max(adapting, key=lambda name: len(records[name][0]))  # its rounds span the rest
    config = configs[longest]
    rounds = [r["round"] for r in records[longest][0]]
    draw_links(axes[-1], rounds, client0_links(config, rounds))
    axes[-1].set_title(f"network {config['network']!r}, client 0", fontsize=9)
    fig.tight_layout()
    figure_style.save(fig, out)
    plt.close(fig)
    return out


def plot_scaling(
    results: Mapping[str, float],
    configs: Mapping[str, Mapping[str, Any]],
    out: Path,
    *,
    title: str,
) -> Path | None:
    """Runs named ``<group>-n<N>``: one line per group, the value (communication seconds)
    against N, in the colour of the group's method. None when no run is named so."""
    groups: dict[str, list[tuple[int, float]]] = {}
    methods: dict[str, str] = {}
    for name, value in results.items():
        match = re.fullmatch(r"(.+)-n(\d+)", name)
        if match:
            groups.setdefault(match.group(1), []).append((int(match.group(2)), value))
            methods.setdefault(match.group(1), figure_style.method_of(configs[name]))
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    seen: dict[str, int] = {}
    for group, points in sorted(groups.items()):
        points.sort()
        k = seen[methods[group]] = seen.get(methods[group], -1) + 1
        ax.plot(
            *zip(*points, strict=True),
            marker="o",
            label=group,
            linewidth=1.2,
            color=figure_style.colour_of(methods[group]),
            linestyle=figure_style.LINE_STYLES[k % len(figure_style.LINE_STYLES)],
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("clients")
    ax.set_ylabel("communication time (virtual s, all rounds)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    figure_style.save(fig, out)
    plt.close(fig)
    return out
