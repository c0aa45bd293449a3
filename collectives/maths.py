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


def scatter_add(
    index_sets: Sequence[NDArray[np.int64]],
    value_sets: Sequence[NDArray[np.float32]],
    weights: Sequence[float],
    size: int,
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Weighted sum of sparse vectors in O(N·k) work and one dense vector of memory.

    Returns the union of the index sets (ascending) and the summed values there. Each
    client's indices must be unique, so a fancy-index ``+=`` adds every entry once.
    """
    factors = normalised_weights(weights)
    total = np.zeros(size, dtype=np.float32)
    touched = np.zeros(size, dtype=bool)
    for indices, values, factor in zip(index_sets, value_sets, factors, strict=True):
        total[indices] += values * np.float32(factor)
        touched[indices] = True
    union = np.flatnonzero(touched)
    return union, total[union]
