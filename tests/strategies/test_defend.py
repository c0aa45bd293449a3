"""The defence meets every collective's contributions in one place (``defend``): a Combine is
screened first unless a Screen of its phase came before, aligned contributions are combined
into one vector, sparse ones come back as each one's values."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from collectives.base import Participant
from collectives.defence import defend
from collectives.program import Combine, ExchangeLog, Screen
from wire.codec import Sparse


class Refuses:
    """A defence that refuses partition 1 and records what it was asked."""

    screens = True

    def __init__(self) -> None:
        self.screened: list[list[int]] = []
        self.combined: list[int] = []

    def screen(self, partitions: Sequence[int], vectors: Sequence, positions: object) -> list:
        self.screened.append(list(partitions))
        return ["points against the rest" if p == 1 else None for p in partitions]

    def combine(self, vectors: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
        self.combined.append(len(vectors))
        return np.mean(vectors, axis=0).astype(np.float32)

    def sparse_values(self, values: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [v * 0.5 for v in values]

    def refusing(self) -> set[int]:
        return set()


def _participants(contributions: list) -> list[Participant]:
    return [
        Participant(node, SimpleNamespace(partition_id=node), 0, None, c)  # type: ignore[arg-type]
        for node, c in enumerate(contributions)
    ]


def _plan() -> SimpleNamespace:
    return SimpleNamespace(log=ExchangeLog(), weights=lambda ps: [1.0] * len(ps))


def test_a_combine_is_screened_first_and_combines_what_was_kept() -> None:
    defence, plan = Refuses(), _plan()
    vectors = [np.full(3, float(i), dtype=np.float32) for i in range(3)]
    answer = defend(Combine(_participants(vectors), "q"), plan, defence, set())  # type: ignore[arg-type]
    assert defence.screened == [[0, 1, 2]] and defence.combined == [2]
    assert [p.node_id for p in answer.participants] == [0, 2]
    np.testing.assert_array_equal(answer.combined, np.full(3, 1.0))
    assert plan.log.refused == ["node 1 (q): points against the rest"]


def test_a_screen_of_the_phase_before_is_not_repeated() -> None:
    defence, plan, phases = Refuses(), _plan(), set()
    participants = _participants([np.ones(2, dtype=np.float32)] * 3)
    kept = defend(Screen(participants, "values"), plan, defence, phases).participants  # type: ignore[arg-type]
    assert defence.combined == []  # a Screen combines nothing
    defend(Combine(kept, "values"), plan, defence, phases)  # type: ignore[arg-type]
    assert defence.screened == [[0, 1, 2]] and defence.combined == [2]


def test_sparse_contributions_come_back_as_each_ones_values() -> None:
    sparses = [Sparse(np.array([i]), np.array([2.0], dtype=np.float32), 4) for i in range(3)]
    answer = defend(Combine(_participants(sparses), "train"), _plan(), Refuses(), set())  # type: ignore[arg-type]
    assert answer.combined is None
    assert [v.tolist() for v in answer.values] == [[1.0], [1.0]]
