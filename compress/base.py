"""What a compressed client sends, in two independent choices, and the protocols they follow.

- A **selector** says which coordinates of e (the compensated update) a client sends. Top-k's
  depend on e and travel with the values; random-k's come from a seed, so the receiver draws
  them itself and no index travels (``draws``). Allgather-style, each client draws from its
  own seed; under an Allreduce-compatible collective every client sends the same set: one
  drawn from the round's shared seed, or for Top-k one the collective finds (a leader's).
- An **encoding** says how the selected values travel (float32, int8, scaled signs, QSGD
  levels) and what the receiver decodes from them.

Error feedback (compress/error_feedback.py) composes with any of them: the residual keeps
whatever the receiver does not decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.typing import NDArray

Vector = NDArray[np.float32]
Indices = NDArray[np.int64]

SELECTION_STREAM = 0x5E1  # the stream of the seeded generators selectors draw from


@dataclass(frozen=True)
class Encoded:
    arrays: dict[str, Array]  # what travels (beside any indices, which the codec encodes)
    decoded: Vector  # the values the receiver will decode from ``arrays``


class EncodingOptions(Protocol):
    """The run's settings an encoding may read (the compression section)."""

    qsgd_levels: int
    qsgd_bucket: int


class Encoding(Protocol):
    """How selected values travel: ``encode`` on the client, ``decode`` at the receiver (which
    raises ``PayloadError`` naming what is wrong). ``decoded`` of an encoding is bit for bit
    what ``decode`` returns for its arrays, on every machine."""

    name: ClassVar[str]
    # the energy of the decoded values is the sent values' (within Allreduce's claim
    # tolerance): a leader's claim about its Top-k energy can be checked against them
    keeps_energy: ClassVar[bool]

    @classmethod
    def from_settings(cls, options: EncodingOptions) -> Self: ...

    def encode(self, values: Vector, rng: np.random.Generator) -> Encoded: ...

    def decode(self, record: ArrayRecord, count: int) -> Vector: ...

    def values_nbytes(self, count: int) -> int:
        """Bytes of ``count`` encoded values (for the cost models)."""
        ...


@dataclass(frozen=True)
class SelectionSeed:
    """What a seeded selection is drawn from: the run's seed and the round, and the client's
    partition for its own set (None: the set every client of the round shares)."""

    run_seed: int
    server_round: int
    partition_id: int | None = None

    def generator(self) -> np.random.Generator:
        own = () if self.partition_id is None else (self.partition_id,)
        return np.random.default_rng([self.run_seed, SELECTION_STREAM, self.server_round, *own])


class Selector(Protocol):
    """Which coordinates of e a client sends: ``k`` chosen outside ``whole`` (the entries a
    compressed round sends whole, e.g. batch-norm buffers), and ``whole``; ascending."""

    name: ClassVar[str]
    # the coordinates come from a seed alone, so a receiver draws them itself (``drawn``) and
    # no index travels; else they depend on e
    draws: ClassVar[bool]

    def select(self, e: Vector, k: int, whole: Indices, seed: SelectionSeed) -> Indices: ...

    def drawn(self, size: int, k: int, whole: Indices, seed: SelectionSeed) -> Indices:
        """The coordinates ``select`` gives for ``seed``, without e (a selector that draws)."""
        ...


def positions_outside(size: int, excluded: Indices) -> Indices:
    """Ascending positions of a vector of ``size`` entries that are not in ``excluded``."""
    pool = np.ones(size, dtype=bool)
    pool[excluded] = False
    return np.flatnonzero(pool)


def sent_count(k: int, size: int, always: int) -> int:
    """Entries a reply carries: ``k`` chosen (at most the rest of the vector) and ``always``."""
    return min(k, size - always) + always
