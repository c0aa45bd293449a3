"""Random-k: k coordinates drawn uniformly without replacement from a seeded generator.

The draw depends on the run's seed and the round only, with the client's partition for its
own set (Allgather-style) and without it for the set every client shares (Allreduce-
compatible), so the receiver draws the same coordinates itself and no index travels. With
error feedback every coordinate is sent within about 1/c rounds of its residual's growth
(Stich et al., "Sparsified SGD with memory", 2018).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from compress.base import Indices, SelectionSeed, Vector, positions_outside


class RandomK:
    name: ClassVar[str] = "randomk"
    draws: ClassVar[bool] = True

    def select(self, e: Vector, k: int, whole: Indices, seed: SelectionSeed) -> Indices:
        return self.drawn(e.size, k, whole, seed)

    def drawn(self, size: int, k: int, whole: Indices, seed: SelectionSeed) -> Indices:
        candidates = positions_outside(size, whole)
        chosen = seed.generator().choice(candidates, size=min(k, candidates.size), replace=False)
        return np.union1d(chosen.astype(np.int64), whole)
