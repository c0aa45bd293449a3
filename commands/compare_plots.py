"""The comparison's plots: accuracy against virtual time and against bytes (mean over seeds,
round by round), the ratio and collective chosen per round next to the link schedule, and
communication time against the number of clients for runs named ``<group>-n<N>``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from commands.plot_ratio_schedule import client0_links, scatter_ratios  # noqa: E402

Rows = Sequence[Mapping[str, Any]]


def mean_curve(runs: Sequence[Rows], x_of: Any) -> tuple[np.ndarray, np.ndarray]:
    """Round-by-round mean of x and of accuracy over seeds (up to the shortest run)."""
    length = min(len(rows) for rows in runs)
    xs = np.array([[x_of(rows, i) for i in range(length)] for rows in runs])
    ys = np.array([[float(rows[i]["accuracy"]) for i in range(length)] for rows in runs])
    return xs.mean(axis=0), ys.mean(axis=0)


LINE_STYLES = ("-", "--", ":", "-.")


def _virtual_s(rows: Rows, i: int) -> float:
    return float(rows[i]["virtual_time_s"])


def _megabytes(rows: Rows, i: int) -> float:
    return sum(int(r["bytes_up"]) + int(r["bytes_down"]) for r in rows[: i + 1]) / 1e6


def plot_accuracy(records: Mapping[str, Sequence[Rows]], out: Path, *, by: str, title: str) -> Path:
    """``by`` = "time" (virtual seconds) or "bytes" (MB both ways, cumulative)."""
    x_of, label = (_virtual_s, "virtual time (s)") if by == "time" else (_megabytes, "MB sent")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, runs) in enumerate(records.items()):
        xs, ys = mean_curve(runs, x_of)
        # matplotlib's colours repeat after ten lines: the next ten are dashed, and so on
        ax.plot(xs, ys, label=name, linewidth=1.2, linestyle=LINE_STYLES[i // 10 % 4])
    ax.set_xlabel(label + (" (log)" if by == "bytes" else ""))
    if by == "bytes":
        ax.set_xscale("log")
    ax.set_ylabel("test accuracy (mean over seeds)")
    ax.set_ylim(0.0, 1.0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


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
    links = client0_links(config, rounds)
    bottom = axes[-1]
    bottom.plot(rounds, [p.latency_s * 1e3 for p in links], color="tab:red")
    bottom.set_ylabel("latency (ms)", color="tab:red")
    twin = bottom.twinx()
    twin.plot(rounds, [p.uplink_bytes_per_s * 8e-6 for p in links], color="tab:green")
    twin.set_ylabel("Mbit/s", color="tab:green")
    bottom.set_xlabel("round")
    bottom.set_title(f"network {config['network']!r}, client 0", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_scaling(results: Mapping[str, float], out: Path, *, title: str) -> Path | None:
    """Runs named ``<group>-n<N>``: one line per group, the value (communication seconds)
    against N. None when no run is named so."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for name, value in results.items():
        match = re.fullmatch(r"(.+)-n(\d+)", name)
        if match:
            groups.setdefault(match.group(1), []).append((int(match.group(2)), value))
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for group, points in sorted(groups.items()):
        points.sort()
        ax.plot(*zip(*points, strict=True), marker="o", label=group, linewidth=1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("clients")
    ax.set_ylabel("communication time (virtual s, all rounds)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
