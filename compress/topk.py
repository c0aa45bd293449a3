"""Top-k: the selector that sends the k entries of e of largest magnitude, and its exact
selection over one flat vector.

A full ``argpartition`` over millions of entries followed by a sort is slow. Instead a
threshold is estimated from an evenly strided sample so that slightly more than k entries
pass, one pass keeps those candidates (already in index order), and the exact k-th largest
magnitude among the few candidates decides which to keep. When the estimate lets too few
through (an adversarial layout) the same exact step runs over the whole vector, so the result
is always exactly the k largest |x|; ties at the k-th value go to the lowest indices.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from compress.base import Indices, SelectionSeed, Vector, positions_outside

_SAMPLE = 16384
_SMALL = 1 << 15


def _exact(
    magnitude: NDArray[np.float32], positions: NDArray[np.int64], k: int
) -> NDArray[np.int64]:
    """The ``k`` entries of ``positions`` with the largest ``magnitude``, in the given order."""
    values = magnitude[positions]
    extra = values.size - k
    if extra == 0:
        return positions
    kth = np.partition(values, extra)[extra]  # k-th largest value
    keep = values > kth
    missing = k - int(np.count_nonzero(keep))
    if missing:
        keep[np.flatnonzero(values == kth)[:missing]] = True
    return positions[keep]


def topk_indices(x: NDArray[np.float32], k: int) -> NDArray[np.int64]:
    """Ascending indices of the ``k`` entries of ``x`` with the largest magnitude."""
    n = int(x.size)
    if not 0 < k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    if k == n:
        return np.arange(n, dtype=np.int64)
    magnitude = np.abs(x)
    if n <= _SMALL or k * 4 > n:
        return _exact(magnitude, np.arange(n, dtype=np.int64), k)
    sample = magnitude[:: max(1, n // _SAMPLE)]
    # Let through about 5% more than k, plus four sampling standard deviations.
    expected = k / n * sample.size
    position = max(0, sample.size - int(np.ceil(1.05 * expected + 4.0 * np.sqrt(expected) + 2)))
    threshold = np.partition(sample, position)[position]
    candidates = np.flatnonzero(magnitude >= threshold)
    if candidates.size < k:
        return _exact(magnitude, np.arange(n, dtype=np.int64), k)
    return _exact(magnitude, candidates, k)


def topk_outside(x: NDArray[np.float32], k: int, excluded: NDArray[np.int64]) -> NDArray[np.int64]:
    """Ascending indices of the ``k`` entries of largest magnitude outside ``excluded`` (at
    most all of them): where a model's buffers, sent whole every round, must not take slots."""
    if excluded.size == 0:
        return topk_indices(x, k)
    candidates = positions_outside(x.size, excluded)
    if candidates.size == 0:
        return candidates
    return candidates[topk_indices(x[candidates], min(k, candidates.size))]


def topk_with(x: NDArray[np.float32], k: int, always: NDArray[np.int64]) -> NDArray[np.int64]:
    """Ascending: the ``k`` entries of largest magnitude outside ``always``, and ``always``
    (a model's buffers, sent every round): ``sent_count(k, x.size, always.size)`` indices."""
    if always.size == 0:
        return topk_indices(x, k)
    return np.union1d(topk_outside(x, k, always), always)


def topk_energy(x: NDArray[np.float32], indices: NDArray[np.int64]) -> float:
    """||x[indices]||², in float64."""
    selected = x[indices].astype(np.float64)
    return float(selected @ selected)


class TopK:
    """Each client its own Top-k (the indices travel); under an Allreduce-compatible
    collective the shared set is found by the collective's index policy."""

    name: ClassVar[str] = "topk"
    draws: ClassVar[bool] = False

    def select(self, e: Vector, k: int, whole: Indices, seed: SelectionSeed) -> Indices:
        return topk_with(e, k, whole)

    def drawn(self, size: int, k: int, whole: Indices, seed: SelectionSeed) -> Indices:
        raise TypeError("Top-k's coordinates depend on e: they travel, they are not drawn")
