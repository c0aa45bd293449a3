"""Robust aggregation (``robust``): how updates combine when one client may be hostile.

- ``none``: the weighted average (FedAvg's maths).
- ``clip``: each update scaled down to at most ``robust-clip`` times the round's median update
  norm, then the weighted average; works for sparse updates too (their values' norms).
- ``clip-screen``: ``clip``, after two screens (``ClipScreen``): near-copies of one update sent
  by several nodes are refused on sight when they point against the rest (a coalition), and a
  node whose updates point against the others' is refused (over its last 20 rounds, its
  update's cosine with the sum of the rest is below 0 by more than 2 standard errors; judged
  from its 5th round, from three nodes up, and nobody is refused when half or more of the
  partitions judged would be). An honest node refused by mistake loses what it sent: its error
  feedback already took it out of its residual.
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
from typing import Any, ClassVar

import numpy as np
from flwr.serverapp.strategy.fedtrimmedavg import trim_mean
from numpy.typing import NDArray

from collectives import ALIGNED, COLLECTIVES
from collectives.maths import weighted_average
from common.settings import Settings
from state.archive import StateError
from state.fields import Fields, Stateless, int_keys
from strategies.policies.collective import run_collectives
from wire.fields import is_number

Vector = np.ndarray
Indices = NDArray[np.int64]


def clip_to_median(vectors: Sequence[Vector], factor: float) -> list[Vector]:
    """Each vector scaled to a norm of at most ``factor`` x the median norm (if above it)."""
    norms = [float(np.linalg.norm(v.astype(np.float64))) for v in vectors]
    limit = factor * float(np.median(norms))
    return [
        v if norm <= limit else v * np.float32(limit / norm)
        for v, norm in zip(vectors, norms, strict=True)
    ]


# Two updates this alike are one update sent twice: colluders' copies, or the same liar twice
# (cosine 1 up to rounding; 0.9997 and up for one vector through two q8 encodings, 0.99995 with
# 1 % noise). Honest clients train on different data and minibatches; the most alike honest pair
# measured had cosine 0.9964 (streams with rate-sized batches, IID digits: `python -m
# benchmarks.copy_spread`, docs/results/coalitions.md), an angle of 4.9 degrees against this
# bound's 2.6. Judged on the parameters alone: batch norm's buffers move alike on every client
# (its step counter is the same integer everywhere).
DUPLICATE_COSINE = 0.999


def alike(vectors: np.ndarray) -> NDArray[np.bool_]:
    """Which rows are near-copies of which (cosine at least ``DUPLICATE_COSINE``; a row is
    alike to itself, unless it is zero)."""
    gram = vectors @ vectors.T
    norms = np.sqrt(np.maximum(np.diag(gram), 0.0))
    safe = np.where(norms > 0.0, norms, 1.0)
    return np.asarray(gram / np.outer(safe, safe) >= DUPLICATE_COSINE)


def cosines_with_the_rest(
    vectors: Sequence[Vector] | np.ndarray,
    counted: NDArray[np.bool_] | None = None,
    copies_of: NDArray[np.bool_] | None = None,
) -> list[float]:
    """Each vector's cosine with the sum of the ``counted`` others (default: all) that are not
    near-copies of it (``copies_of``, default: ``alike``), every vector clipped to the counted
    ones' median norm first (so no one vector outweighs the others in that sum). Leaving its
    copies out is what keeps colluders sending one flipped update from vouching for each
    other."""
    stacked = np.asarray(vectors, dtype=np.float64)
    counted = np.ones(len(stacked), dtype=bool) if counted is None else counted
    # Every dot product needed, from one product of the rows: norms are its diagonal, clipping
    # scales its rows and columns, and own . rest and |rest|^2 are sums of its entries (the
    # rest's rows were summed once per vector before: most of a round's screen).
    gram = stacked @ stacked.T
    norms = np.sqrt(np.maximum(np.diag(gram), 0.0))
    limit = float(np.median(norms[counted])) if counted.any() else 0.0
    clip = np.minimum(1.0, limit / np.where(norms > 0.0, norms, 1.0))
    clipped = gram * np.outer(clip, clip)
    copies_of = alike(stacked) if copies_of is None else copies_of
    cosines = []
    for i, copies in enumerate(copies_of):
        rest = counted & ~copies
        own_norm = math.sqrt(max(float(clipped[i, i]), 0.0))
        rest_norm = math.sqrt(max(float(clipped[rest][:, rest].sum()), 0.0))
        scale = own_norm * rest_norm
        cosines.append(float(clipped[i, rest].sum()) / scale if scale > 0.0 else 0.0)
    return cosines


class NoDefence(Stateless):
    name: ClassVar[str] = "none"
    coordinatewise: ClassVar[bool] = False
    screens: ClassVar[bool] = False  # refuses some updates (``screen``) before combining

    @classmethod
    def from_settings(cls, settings: Settings, buffers: Indices) -> NoDefence:
        """The defence the settings make; ``buffers``: the model's, left out of comparisons."""
        return cls()

    def screen(
        self,
        partitions: Sequence[int],
        vectors: Sequence[Vector],
        positions: NDArray[np.int64] | None = None,
    ) -> list[str | None]:
        """Per partition's update, why it is refused (None: kept). ``positions``: where the
        vectors' entries sit in the model (None: the whole model, in order)."""
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

    @classmethod
    def from_settings(cls, settings: Settings, buffers: Indices) -> NoDefence:
        return cls(settings.trust.robust_clip)

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return weighted_average(clip_to_median(vectors, self.factor), weights)

    def sparse_values(self, values: Sequence[Vector]) -> Sequence[Vector]:
        return clip_to_median(values, self.factor)


class ClipScreen(Clip):
    """``clip``, after a screen of each update's direction. An update's cosine is taken with the
    sum of the rest of the round, which leaves out its near-copies (``DUPLICATE_COSINE``) and
    the partitions already judged against, every update clipped to the median norm first.
    - Copies: an update that two or more nodes sent (colluders sending one update; one vector
      re-encoded or jittered by up to about 1 % stays within the bound) is refused on sight
      when it points against the rest that round. Copies of an update that agrees with the rest
      are kept: an attacker that copies an honest node's update cannot get it refused, beyond
      the rounds where that update is against the rest anyway (about one in ten).
    - Direction: a node whose updates point against the others' is refused: over the last
      ``WINDOW`` rounds it was screened in, its update's cosine with the rest is below 0 on
      average by more than ``Z`` standard errors (judged from its ``MIN_ROUNDS``-th, from
      ``MIN_NODES`` updates a round up; once judged, it is refused in smaller rounds too). One
      round's cosine is noisy (an honest minibatch update is below 0 in about one round in ten,
      and Top-k updates that barely overlap sit near 0); its average over rounds is not, so an
      honest node is not refused and a sign-flipped one, however it scales its update, is.
      Nobody is refused for direction when half or more of the partitions judged so far would
      be (no majority to judge by): counted over the federation, not the round, since with
      sampling a few colluders can be half a round.
    Histories are kept per partition, not per node id: a device that reconnects as a new node
    (or an attacker that restarts to shed its record) takes its partition's history with it.
    ``buffers`` (model positions) are left out of every comparison."""

    name: ClassVar[str] = "clip-screen"
    screens: ClassVar[bool] = True
    WINDOW: ClassVar[int] = 20  # rounds of a node's history that count
    MIN_ROUNDS: ClassVar[int] = 5  # a standard error needs a sample
    Z: ClassVar[float] = 2.0
    MIN_NODES: ClassVar[int] = 3  # of two updates against each other, either may be the liar

    @classmethod
    def from_settings(cls, settings: Settings, buffers: Indices) -> NoDefence:
        return cls(settings.trust.robust_clip, buffers)

    def __init__(self, factor: float, buffers: NDArray[np.int64] | None = None) -> None:
        super().__init__(factor)
        self.buffers = np.zeros(0, dtype=np.int64) if buffers is None else buffers
        self.cosines: dict[int, deque[float]] = {}  # partition -> its last cosines with the rest
        self._distrusted: set[int] = set()

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {
            "schema": self.STATE_SCHEMA,
            "cosines": int_keys({p: list(c) for p, c in self.cosines.items()}),
            "distrusted": sorted(self._distrusted),
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("clip-screen", state, self.STATE_SCHEMA)

        def window(values: Any) -> deque[float]:
            ok = isinstance(values, list) and len(values) <= self.WINDOW
            cosine = lambda v: is_number(v) and math.isfinite(v) and abs(v) <= 1 + 1e-6  # noqa: E731
            if not ok or not all(cosine(v) for v in values):
                raise ValueError(f"not at most {self.WINDOW} cosines")
            return deque(values, maxlen=self.WINDOW)

        self.cosines = fields.int_map("cosines", window)
        distrusted = fields.integers("distrusted")
        fields.done()
        if any(p not in self.cosines for p in distrusted):
            raise StateError("clip-screen: a distrusted partition it has no cosines of")
        self._distrusted = set(distrusted)

    def screen(
        self,
        partitions: Sequence[int],
        vectors: Sequence[Vector],
        positions: NDArray[np.int64] | None = None,
    ) -> list[str | None]:
        reasons: list[str | None] = [None] * len(vectors)
        if len(vectors) >= self.MIN_NODES:
            compared = self._parameters(vectors, positions)
            copies_of = alike(compared)
            copies = copies_of.sum(axis=1) - 1  # each one's near-copies from other nodes
            judged = self._judged_against()
            counted = (copies == 0) & np.array([p not in judged for p in partitions])
            cosines = cosines_with_the_rest(compared, counted, copies_of)
            for i, (partition, cosine) in enumerate(zip(partitions, cosines, strict=True)):
                self.cosines.setdefault(partition, deque(maxlen=self.WINDOW)).append(cosine)
                if copies[i] and cosine < 0.0:
                    reasons[i] = (
                        f"it sent one update with {copies[i]} other node(s) (cosine >= "
                        f"{DUPLICATE_COSINE}), and it points against the rest (cosine "
                        f"{cosine:.3f})"
                    )
        judged = self._judged_against()
        for i, partition in enumerate(partitions):
            if partition in judged:
                reasons[i] = reasons[i] or self._against(self.cosines[partition])
        refused = {p for p, r in zip(partitions, reasons, strict=True) if r is not None}
        self._distrusted = judged | refused
        return reasons

    def refusing(self) -> set[int]:
        """Partitions refused this round or judged against (when there is a majority to judge
        by), sampled this round or not."""
        return set(self._distrusted)

    def _parameters(
        self, vectors: Sequence[Vector], positions: NDArray[np.int64] | None
    ) -> np.ndarray:
        """The vectors as float64 rows, their buffer entries left out."""
        stacked = np.asarray(vectors, dtype=np.float64)
        if self.buffers.size == 0:
            return stacked
        at = np.arange(stacked.shape[1]) if positions is None else positions
        return stacked[:, ~np.isin(at, self.buffers)]

    def _judged_against(self) -> set[int]:
        """Partitions whose history points against the others', when they are fewer than half
        of those judged so far (else none: no majority to judge by)."""
        against = {p for p, history in self.cosines.items() if self._against(history)}
        judged = sum(len(history) >= self.MIN_ROUNDS for history in self.cosines.values())
        return against if 2 * len(against) < judged else set()

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

    @classmethod
    def from_settings(cls, settings: Settings, buffers: Indices) -> NoDefence:
        return cls(settings.trust.robust_trim)

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return np.asarray(trim_mean(np.stack(vectors), self.trim), dtype=np.float32)


class Median(NoDefence):
    name: ClassVar[str] = "median"
    coordinatewise: ClassVar[bool] = True

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector:
        return np.median(np.stack(vectors), axis=0).astype(np.float32)


def _defences(cls: type[NoDefence]) -> list[type[NoDefence]]:
    return [cls, *(d for sub in cls.__subclasses__() for d in _defences(sub))]


DEFENCES: dict[str, type[NoDefence]] = {d.name: d for d in _defences(NoDefence)}


def check(settings: Settings) -> list[str]:
    """A defence that combines coordinate by coordinate needs every client's values at the
    same coordinates: the defences and the collectives say which do."""
    defence = DEFENCES[settings.trust.robust]
    unaligned = [name for name in run_collectives(settings) if name not in ALIGNED]
    if not defence.coordinatewise or not unaligned:
        return []
    aligned = " or ".join(repr(name) for name in COLLECTIVES if name in ALIGNED)
    return [
        f"robust = {defence.name!r} combines updates coordinate by coordinate, which needs "
        f"them at the same coordinates: collective = {aligned} (got {unaligned[0]!r}, whose "
        "index sets differ per client)"
    ]
