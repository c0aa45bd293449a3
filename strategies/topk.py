"""Exact Top-k selection by magnitude over one flat vector.

``np.argpartition`` over millions of entries is slow; instead a threshold is estimated from
an evenly strided sample so that slightly more than k entries pass, one pass keeps the
candidates, and a partition of the few candidates picks exactly k. If the estimate lets too
few entries through (an adversarial layout), the full partition is the fallback, so the
result is always exactly the k largest |x| (ties broken by partition order).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

_SAMPLE = 8192
_SMALL = 1 << 16


def topk_indices(x: NDArray[np.float32], k: int) -> NDArray[np.int64]:
    """Ascending indices of the ``k`` entries of ``x`` with the largest magnitude."""
    n = int(x.size)
    if not 0 < k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    if k == n:
        return np.arange(n, dtype=np.int64)
    magnitude = np.abs(x)
    if n <= _SMALL or k * 4 > n:
        chosen = np.argpartition(magnitude, n - k)[n - k :]
        return np.sort(chosen).astype(np.int64)
    step = max(1, n // _SAMPLE)
    sample = np.sort(magnitude[::step])
    # Aim for about 1.3 k + a few sampling standard deviations of candidates.
    expected = k / n * sample.size
    margin = 1.3 * expected + 4.0 * np.sqrt(expected) + 2
    position = max(0, sample.size - int(np.ceil(margin)))
    threshold = sample[position]
    candidates = np.flatnonzero(magnitude >= threshold)
    if candidates.size < k:
        chosen = np.argpartition(magnitude, n - k)[n - k :]
        return np.sort(chosen).astype(np.int64)
    if candidates.size > k:
        keep = np.argpartition(magnitude[candidates], candidates.size - k)[candidates.size - k :]
        candidates = np.sort(candidates[keep])
    return candidates.astype(np.int64)


def topk_energy(x: NDArray[np.float32], indices: NDArray[np.int64]) -> float:
    """||x[indices]||², in float64."""
    selected = x[indices].astype(np.float64)
    return float(selected @ selected)
