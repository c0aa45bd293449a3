"""One-phase index policies of Allreduce-compatible Top-k, against a simulation of error feedback:
clients whose per-round updates are fixed vectors, residuals kept as the client half keeps them."""

import numpy as np
import pytest

from collectives.allreduce import INDEX_POLICIES
from collectives.allreduce.index_policies import (
    IndexPolicy,
    PreviousTopk,
    ResidualHints,
    hint_count,
)
from compress.topk import topk_indices
from wire.codec import Sparse

SIZE, K, CLIENTS = 400, 10, 5
NO_BUFFERS = np.zeros(0, dtype=np.int64)


def _simulate(
    policy: IndexPolicy, rounds: int, seed: int = 0, hints: bool = True
) -> tuple[list[np.ndarray], np.ndarray, list[float]]:
    """Index sets of every round, the clients' mean residual at the end, and per round the
    share of the mean compensated update's energy the index set carried."""
    rng = np.random.default_rng(seed)
    scale = rng.lognormal(0.0, 1.0, SIZE)  # a few coordinates carry most of the energy
    updates = rng.normal(1.0, 0.3, (CLIENTS, SIZE)) * scale
    residuals = np.zeros((CLIENTS, SIZE))
    index_set = topk_indices(updates[0].astype(np.float32), K)  # round 1: a leader's
    sets, captured = [], []
    m = hint_count(K, policy.hint_share) if hints else 0
    for _ in range(rounds):
        sets.append(index_set)
        compensated = updates + residuals
        mean = compensated.mean(axis=0)
        captured.append(float(mean[index_set] @ mean[index_set] / (mean @ mean)))
        values = mean[index_set]
        residuals = compensated.copy()
        residuals[:, index_set] = 0.0
        reported = [(1.0, topk_indices(r.astype(np.float32), m)) for r in residuals] if m else []
        update = Sparse(index_set, values.astype(np.float32), SIZE)
        next_set = policy.next_index_set(update, K, reported, NO_BUFFERS)
        assert next_set is not None and next_set.size == K
        assert np.all(np.diff(next_set) > 0)  # ascending, no duplicates
        index_set = next_set
    return sets, residuals.mean(axis=0), captured


def test_global_freezes_on_its_first_index_set() -> None:
    sets, residual, _ = _simulate(PreviousTopk(), rounds=30)
    assert all(np.array_equal(s, sets[1]) for s in sets[1:])
    sent = np.unique(np.concatenate(sets))
    assert sent.size <= 2 * K  # everything else is never sent: its residual only grows
    assert np.abs(residual).max() > 25


@pytest.mark.parametrize("hints", [True, False])
def test_residual_hints_moves_and_sends_every_coordinate(hints: bool) -> None:
    """With or without the clients' hints, every coordinate's residual is sent within a few
    sweeps of the index set over the vector, and the residual stays bounded."""
    sweeps = 6
    sets, residual, _ = _simulate(ResidualHints(0.25), rounds=sweeps * SIZE // K, hints=hints)
    assert np.unique(np.concatenate(sets)).size == SIZE
    assert np.abs(residual).max() < np.abs(_simulate(PreviousTopk(), 30)[1]).max()


def test_hints_point_the_index_set_at_the_largest_residuals() -> None:
    """The hinted index set carries more of the compensated update's energy than the one built
    from the server's estimate alone, and less than each round's own Top-k (the leader's)."""
    captured = {}
    for hints in (True, False):
        *_, shares = _simulate(ResidualHints(0.25), rounds=60, hints=hints, seed=3)
        captured[hints] = float(np.mean(shares[20:]))
    assert captured[True] > captured[False] + 0.02
    assert captured[True] < 1.0


def test_a_client_sways_the_hinted_slots_by_its_weight_only() -> None:
    policy = ResidualHints(0.5)
    update = Sparse(np.arange(K, dtype=np.int64), np.ones(K, dtype=np.float32), SIZE)
    honest = np.arange(100, 100 + K // 2, dtype=np.int64)
    liar = np.arange(300, 300 + K // 2, dtype=np.int64)
    hints = [(1.0, honest), (1.0, honest), (1.0, honest), (1.0, liar)]
    chosen = policy.next_index_set(update, K, hints, NO_BUFFERS)
    assert chosen is not None
    assert set(honest) <= set(chosen.tolist())
    assert not set(liar) & set(chosen.tolist())  # half of k is hinted: the most voted fill it


def test_hint_count_and_the_policy_table() -> None:
    assert hint_count(100, 0.25) == 25 and hint_count(3, 0.01) == 1 and hint_count(5, 0.0) == 0
    assert hint_count(4, 1.0) == 4
    assert INDEX_POLICIES["residual-hints"](0.25).hint_share == 0.25
    assert INDEX_POLICIES["global"](0.25).hint_share == 0.0  # asks for nothing
    assert (
        INDEX_POLICIES["leader"](0.25).next_index_set(
            Sparse(np.arange(3, dtype=np.int64), np.ones(3, dtype=np.float32), 10),
            3,
            [],
            NO_BUFFERS,
        )
        is None
    )


@pytest.mark.parametrize("name", ["global", "residual-hints"])
def test_one_phase_policies_leave_the_buffers_out_of_their_k_slots(name: str) -> None:
    """The buffers (batch-norm statistics, counters) are added to every index set whole; the
    k chosen slots go to weights even where the buffers moved most (counters move by 1 a step)."""
    buffers = np.arange(0, 20, dtype=np.int64)
    values = np.linspace(0.1, 0.2, SIZE).astype(np.float32)
    values[buffers] = 50.0
    update = Sparse(np.arange(SIZE, dtype=np.int64), values, SIZE)
    policy = INDEX_POLICIES[name](0.5)
    hints = [(1.0, buffers[:K])]  # votes for buffers count for nothing either
    chosen = policy.next_index_set(update, K, hints, buffers)
    assert chosen is not None and chosen.size == K
    assert not np.isin(chosen, buffers).any()
