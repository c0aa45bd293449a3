"""Aggregation maths as small pure functions over flat float32 vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray


def normalised_weights(weights: Sequence[float]) -> list[float]:
    total = float(sum(weights))
    if not weights or total <= 0:
        raise ValueError(f"weights must be non-empty with a positive sum, got {list(weights)}")
    return [float(w) / total for w in weights]


def weighted_average(
    vectors: Sequence[NDArray[np.float32]], weights: Sequence[float]
) -> NDArray[np.float32]:
    """Σ_i (w_i / Σ w) · v_i, accumulated in float32 in the given order (as Flower's FedAvg)."""
    factors = normalised_weights(weights)
    out = np.zeros_like(vectors[0], dtype=np.float32)
    for vector, factor in zip(vectors, factors, strict=True):
        out += vector * np.float32(factor)
    return out
