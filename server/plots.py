"""Plots of a run's records (matplotlib, no screen needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from server import figure_style  # noqa: E402


def plot_accuracy(
    rounds: Sequence[dict[str, Any]],
    initial_accuracy: float,
    path: Path,
    title: str,
    config: Mapping[str, Any],
) -> list[Path]:
    """Accuracy on the server's test split against cumulative virtual time, in the colour of
    the run's method; ``path`` (PNG) and an SVG beside it."""
    times = [0.0] + [float(r["virtual_time_s"]) for r in rounds]
    accuracy = [initial_accuracy] + [float(r["accuracy"]) for r in rounds]
    fig, ax = plt.subplots(figsize=(6, 4))
    colour = figure_style.colour_of(figure_style.method_of(config))
    ax.plot(times, accuracy, marker="." if len(times) < 50 else None, color=colour)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    written = figure_style.save(fig, path, dpi=120)
    plt.close(fig)
    return written
