"""Client sampling: which partitions train in a round (``clients-per-round``).

Sampling is over partition ids, not node ids: Flower draws node ids at random when a
simulation starts, so only partitions repeat between runs with one seed. The server learns
which node holds which partition from an ``identify`` query (one small message per new node,
answered with the node's partition id) before the node is first sampled.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

SAMPLING_STREAM = 0x5A  # the seeded generator's stream: its own, so nothing else shifts


class ClientSampler:
    """``per_round`` partitions a round, drawn without replacement by a generator seeded with
    (seed, round): the same seed gives the same partitions, a resumed run included."""

    def __init__(self, per_round: int, seed: int) -> None:
        if per_round < 1:
            raise ValueError(f"clients-per-round must be >= 1 to sample, got {per_round}")
        self.per_round = per_round
        self.seed = seed

    def partitions(self, server_round: int, available: list[int]) -> list[int]:
        """The round's partitions among ``available`` (all of them if there are fewer)."""
        pool = sorted(available)
        if len(pool) <= self.per_round:
            return pool
        rng = np.random.default_rng([self.seed, SAMPLING_STREAM, server_round])
        chosen = rng.choice(len(pool), size=self.per_round, replace=False)
        return sorted(pool[i] for i in chosen)

    def nodes(self, server_round: int, owner_of: Mapping[int, int]) -> tuple[list[int], list[int]]:
        """(partitions, their nodes) for the round, from partition -> node of connected nodes."""
        partitions = self.partitions(server_round, list(owner_of))
        return partitions, sorted(owner_of[p] for p in partitions)
