"""Compression gain: how much of a vector's energy its Top-k keeps, at several ratios.

Clients report it (NSGA-II's statistical efficiency, ScaDLES' adaptive rule); kept apart from
the scheduler so that a ClientApp does not import pymoo.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

DEFAULT_GAIN_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def gain_curve(compensated: NDArray[np.float32], ratios: Sequence[float]) -> list[float]:
    """||TopK(e, c)||² / ||e||² for every c in ``ratios`` (1.0 for a zero vector)."""
    energy = np.sort((compensated.astype(np.float64)) ** 2)[::-1]
    total = float(energy.sum())
    if total == 0.0:
        return [1.0 for _ in ratios]
    cumulative = np.cumsum(energy)
    size = compensated.size
    return [
        min(1.0, float(cumulative[max(1, min(size, math.ceil(c * size))) - 1] / total))
        for c in ratios
    ]
