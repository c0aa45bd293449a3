"""Where a shared Top-k index set comes from (``index-policy``): each round's leader (the
papers'), or one phase with I sent in the instructions, chosen from the last aggregate.

- ``leader``: every round's I is its leader's own Top-k (three phases).
- ``residual-hints``: I from the clients' reported residual indices and the server's estimate
  of their residuals (``ResidualHints``).
- ``global``: the Top-k of the previous aggregate, which freezes (``PreviousTopk``).
A model's buffers are in every I and never take one of its k slots.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from collectives.base import Indices
from compress.topk import topk_indices, topk_outside
from state.archive import StateError
from state.fields import Fields, Stateless
from wire.codec import Sparse

Hints = Sequence[tuple[float, Indices]]  # (a client's aggregation weight, its residual indices)


def hint_count(k: int, share: float) -> int:
    """Residual indices a client reports with an index set of ``k`` (0 when share is 0)."""
    return 0 if share <= 0 else max(1, min(k, math.ceil(share * k)))


class IndexPolicy(Protocol):
    hint_share: float  # residual indices per client, as a share of k (0: none asked)
    one_phase: bool  # I travels with the instructions (after round 1)

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        """The next round's index set from this round's aggregated update (None: a leader's),
        ``k`` indices outside ``excluded`` (the model's buffers, added to every I anyway)."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: object, size: int) -> None: ...


class LeaderEachRound(Stateless):
    """The papers' policy: every round's I comes from its leader (three phases)."""

    hint_share = 0.0
    one_phase = False

    def load_state_dict(self, state: object, size: int = 0) -> None:
        super().load_state_dict(state)

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        return None


class PreviousTopk(Stateless):
    """``global``: the Top-k of the previous aggregate. It freezes: that update is non-zero
    exactly on the previous I, so its Top-k is I again. Kept for reference."""

    hint_share = 0.0
    one_phase = True

    def load_state_dict(self, state: object, size: int = 0) -> None:
        super().load_state_dict(state)

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        return topk_outside(update.dense(), k, excluded)


class ResidualHints:
    """``residual-hints``: one phase, and I learns where the clients' residuals are.

    Each client reports, with its values, the indices of its ``hint_share`` x k largest
    residual entries (indices only: a cheap sketch of where its unsent mass sits). The next I
    takes up to half of k from those hints, most voted first (votes weighted like the
    aggregation, so a client sways at most its own weight), and the rest from the server's
    estimate of the mean residual: error feedback empties a coordinate when it is sent and it
    then grows by about its per-round update, so a value sent after ``age`` rounds unsent
    gives the rate |value| / age, and the estimate is rate x rounds since it was last sent.
    Coordinates never sent take the median known rate and every rate has a floor
    (``RATE_FLOOR`` x that median), so an unsent coordinate's estimate grows without bound and
    every coordinate's residual is eventually sent.
    """

    RATE_FLOOR = 1e-3
    HINTED_SHARE = 0.5  # of k, at most, taken from the hints
    one_phase = True

    def __init__(self, hint_share: float) -> None:
        self.hint_share = hint_share
        self.age: NDArray[np.float64] | None = None  # rounds of accumulation, counting the next
        self.rate: NDArray[np.float64] | None = None  # NaN: never sent

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {"schema": self.STATE_SCHEMA, "age": self.age, "residual_rate": self.rate}

    def load_state_dict(self, state: object, size: int) -> None:
        fields = Fields("residual-hints", state, self.STATE_SCHEMA)
        self.age = fields.optional_array("age", "float64", (size,))
        self.rate = fields.optional_array("residual_rate", "float64", (size,))
        fields.done()
        if (self.age is None) != (self.rate is None):
            raise StateError("residual-hints: age and residual_rate come together")
        if self.age is not None and not np.all(self.age >= 1):
            raise StateError("residual-hints: an age below one round")

    def estimate(self, update: Sparse, excluded: Indices) -> NDArray[np.float64]:
        """Observe this round's aggregate; the estimated residual of the next round. The
        typical rate is the weights' (``excluded``: the buffers, sent every round)."""
        if self.age is None or self.rate is None or self.age.size != update.size:
            self.age = np.ones(update.size)
            self.rate = np.full(update.size, np.nan)
        sent = update.indices
        self.rate[sent] = np.abs(update.values.astype(np.float64)) / self.age[sent]
        self.age += 1.0
        self.age[sent] = 1.0
        known = np.isfinite(self.rate)
        rated = known.copy()
        rated[excluded] = False
        typical = float(np.median(self.rate[rated])) if rated.any() else 1.0
        typical = typical if typical > 0 else 1.0
        rate = np.where(known, np.maximum(self.rate, self.RATE_FLOOR * typical), typical)
        return rate * self.age

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        score = self.estimate(update, excluded)
        votes = np.zeros(update.size)
        for weight, indices in hints:
            votes[indices] += weight
        votes[excluded] = 0.0
        score[excluded] = 0.0  # passed over by the fill, like the hinted ones below
        k = min(k, update.size - excluded.size)
        voted = np.flatnonzero(votes > 0)
        slots = min(voted.size, int(self.HINTED_SHARE * k))
        # most votes first, then the larger estimate, then the lower index
        order = np.lexsort((voted, -score[voted], -votes[voted]))
        hinted = voted[order[:slots]]
        score[hinted] = 0.0  # every other score is positive: the fill passes them over
        rest = topk_indices(score.astype(np.float32), k - slots) if k > slots else hinted[:0]
        return np.sort(np.concatenate([hinted, rest]))


# index policy -> a new policy object, given the share of k clients report as residual hints
LEADER_EACH_ROUND = "leader"
INDEX_POLICIES: dict[str, Callable[[float], IndexPolicy]] = {
    LEADER_EACH_ROUND: lambda hint_share: LeaderEachRound(),
    "global": lambda hint_share: PreviousTopk(),
    "residual-hints": ResidualHints,
}
