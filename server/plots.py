"""Plots of a run's records (matplotlib, no screen needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_accuracy(
    rounds: Sequence[dict[str, Any]], initial_accuracy: float, path: Path, title: str
) -> None:
    """Accuracy on the server's test split against cumulative virtual time."""
    times = [0.0] + [float(r["virtual_time_s"]) for r in rounds]
    accuracy = [initial_accuracy] + [float(r["accuracy"]) for r in rounds]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(times, accuracy, marker="." if len(times) < 50 else None)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
