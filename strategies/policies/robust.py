"""Robust aggregation (``robust``): how updates combine when one client may be hostile.

- ``none``: the weighted average (FedAvg's maths).
- ``clip``: each update scaled down to at most ``robust-clip`` times the round's median update
  norm, then the weighted average; works for sparse updates too (their values' norms).
- ``clip-screen``: ``clip``, and a node whose updates point against the others' is refused
  (``ClipScreen``: over its last 20 rounds, its update's cosine with the sum of the rest is
  below 0 by more than 2 standard errors; judged from its 10th round, from three nodes up, and
  nobody is refused when half or more would be). An honest node refused by mistake loses what
  it sent: its error feedback already took it out of its residual.
- ``trimmed-mean``: coordinate-wise mean after cutting ``robust-trim`` of the updates from each
  end (Flower's FedTrimmedAvg maths, unweighted).
- ``median``: coordinate-wise median (Flower's FedMedian maths, unweighted).
The last two need every update at the same coordinates: dense rounds and Allreduce's values at
the shared index set, not Allgather's own index sets (settings refuse that combination).
"""

from __future__ import annotations

import math
from collections import deque
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


# Two updates this alike are one update sent twice: honest clients train on different data
# and minibatches, so theirs never are (colluders' copies, or the same liar twice, are).
DUPLICATE_COSINE = 0.99


def cosines_with_the_rest(vectors: Sequence[Vector]) -> list[float]:
    """Each vector's cosine with the sum of the others that are not near-copies of it, every
    vector clipped to the median norm first (so no one vector outweighs the others in that
    sum). Leaving its copies out is what keeps colluders sending one flipped update from
    vouching for each other; copies that are half or more of the vectors stay in (honest
    updates on IID data can agree that closely, and would otherwise judge only the rest)."""
    clipped = np.stack(clip_to_median(vectors, 1.0)).astype(np.float64)
    norms = np.linalg.norm(clipped, axis=1)
    unit = clipped / np.where(norms > 0.0, norms, 1.0)[:, None]
    alike = unit @ unit.T >= DUPLICATE_COSINE  # each vector is alike to itself
    cosines = []
    for i, (own, copies) in enumerate(zip(clipped, alike, strict=True)):
        if 2 * copies.sum() >= len(clipped):  # alike as a majority: honest updates that agree
            copies = np.arange(len(clipped)) == i
        rest = clipped[~copies].sum(axis=0)
        scale = float(np.linalg.norm(own) * np.linalg.norm(rest))
        cosines.append(float(own @ rest) / scale if scale > 0.0 else 0.0)
    return cosines


class NoDefence:
    name: ClassVar[str] = "none"
    coordinatewise: ClassVar[bool] = False
    screens: ClassVar[bool] = False  # refuses some updates (``screen``) before combining

    def screen(self, partitions: Sequence[int], vectors: Sequence[Vector]) -> list[str | None]:
        """Per partition's update, why it is refused (None: kept)."""
        return [None] * len(vectors)

    def refusing(self) -> set[int]:
        """Partitions its last verdict refused (Allreduce lets none of them pick an index
        set)."""
        return set()

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


class ClipScreen(Clip):
    """``clip``, and a node whose updates point against the others' is refused: over the last
    ``WINDOW`` rounds it was screened in, its update's cosine with the sum of the rest is below 0
    on average by more than ``Z`` standard errors (judged from its ``MIN_ROUNDS``-th). One
    round's cosine is noisy (an honest minibatch update is below 0 in about one round in ten,
    and Top-k updates that barely overlap sit near 0); its average over rounds is not, so an
    honest node is not refused and a sign-flipped one, however it scales its update, is.
    Histories are kept per partition, not per node id: a device that reconnects as a new node
    (or an attacker that restarts to shed its record) takes its partition's history with it."""

    name: ClassVar[str] = "clip-screen"
    screens: ClassVar[bool] = True
    WINDOW: ClassVar[int] = 20  # rounds of a node's history that count
    MIN_ROUNDS: ClassVar[int] = 10  # a standard error needs a sample (and early rounds settle)
    Z: ClassVar[float] = 2.0
    MIN_NODES: ClassVar[int] = 3  # of two updates against each other, either may be the liar

    def __init__(self, factor: float) -> None:
        super().__init__(factor)
        self.cosines: dict[int, deque[float]] = {}  # partition -> its last cosines with the rest
        self._refusing: set[int] = set()

    def screen(self, partitions: Sequence[int], vectors: Sequence[Vector]) -> list[str | None]:
        reasons: list[str | None] = [None] * len(vectors)
        if len(vectors) >= self.MIN_NODES:
            cosines = cosines_with_the_rest(vectors)
            for i, (partition, cosine) in enumerate(zip(partitions, cosines, strict=True)):
                history = self.cosines.setdefault(partition, deque(maxlen=self.WINDOW))
                history.append(cosine)
                reasons[i] = self._against(history)
            if 2 * sum(r is not None for r in reasons) >= len(vectors):
                reasons = [None] * len(vectors)  # no majority to judge by
        self._refusing = {n for n, r in zip(partitions, reasons, strict=True) if r is not None}
        return reasons

    def refusing(self) -> set[int]:
        return set(self._refusing)

    def _against(self, history: deque[float]) -> str | None:
        if len(history) < self.MIN_ROUNDS:
            return None
        mean = float(np.mean(history))
        error = float(np.std(history, ddof=1)) / math.sqrt(len(history))
        if mean + self.Z * error >= 0.0:
            return None
        return (
            f"its updates point against the others' (mean cosine {mean:.3f} +- {error:.3f} "
            f"over its last {len(history)} rounds)"
        )


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
