"""Robust aggregation (``robust``): how updates combine when one client may be hostile.

- ``none``: the weighted average (FedAvg's maths).
- ``clip``: each update scaled down to at most ``robust-clip`` times the round's median update
  norm, then the weighted average; works for sparse updates too (their values' norms).
- ``trimmed-mean``: coordinate-wise mean after cutting ``robust-trim`` of the updates from each
  end (Flower's FedTrimmedAvg maths, unweighted).
- ``median``: coordinate-wise median (Flower's FedMedian maths, unweighted).
The last two need every update at the same coordinates: dense rounds and Allreduce's values at
the shared index set, not Allgather's own index sets (settings refuse that combination).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from flwr.serverapp.strategy.fedtrimmedavg import trim_mean

from strategies.collectives.maths import weighted_average

Vector = np.ndarray


def clip_to_median(vectors: Sequence[Vector], factor: float) -> list[Vector]:
    """Each vector scaled to a norm of at most ``factor`` x the median norm (if above it)."""
    norms = [float(np.linalg.norm(v.astype(np.float64))) for v in vectors]
    limit = factor * float(np.median(norms))
    return [
        v if norm <= limit else v * np.float32(limit / norm)
        for v, norm in zip(vectors, norms, strict=True)
    ]


class NoDefence:
    name: ClassVar[str] = "none"
    coordinatewise: ClassVar[bool] = False

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return weighted_average(vectors, weights)

    def sparse_values(self, values: Sequence[Vector]) -> Sequence[Vector]:
        return values


class Clip(NoDefence):
    name: ClassVar[str] = "clip"

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return weighted_average(clip_to_median(vectors, self.factor), weights)

    def sparse_values(self, values: Sequence[Vector]) -> Sequence[Vector]:
        return clip_to_median(values, self.factor)


class TrimmedMean(NoDefence):
    name: ClassVar[str] = "trimmed-mean"
    coordinatewise: ClassVar[bool] = True

    def __init__(self, trim: float) -> None:
        self.trim = trim

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return np.asarray(trim_mean(np.stack(vectors), self.trim), dtype=np.float32)


class Median(NoDefence):
    name: ClassVar[str] = "median"
    coordinatewise: ClassVar[bool] = True

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return np.median(np.stack(vectors), axis=0).astype(np.float32)
