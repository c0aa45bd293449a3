import numpy as np
from flwr.app import RecordDict

from client.compression import (
    PENDING_KEY,
    RESIDUAL_KEY,
    ErrorFeedback,
    compress_topk,
    hold_compensated,
    send_values_at,
)
from wire.codec import indices_record


def test_allgather_invariant_compensated_equals_sent_plus_residual_over_rounds() -> None:
    rng = np.random.default_rng(0)
    state = RecordDict()
    assert RESIDUAL_KEY not in state
    residual = np.zeros(1000, np.float32)  # starts at zeros
    for _ in range(6):
        update = rng.standard_normal(1000).astype(np.float32)
        sparse, compensated = compress_topk(state, update, k=50)
        np.testing.assert_array_equal(compensated, update + residual)
        residual = ErrorFeedback.from_state(state, 1000).residual
        np.testing.assert_array_equal(compensated, sparse.dense() + residual)
        assert np.count_nonzero(residual[sparse.indices]) == 0


def test_shared_indices_invariant_residual_keeps_everything_else() -> None:
    rng = np.random.default_rng(1)
    state = RecordDict()
    residual = np.zeros(500, np.float32)
    for _ in range(4):
        update = rng.standard_normal(500).astype(np.float32)
        norm2 = hold_compensated(state, update, k=20)
        compensated = update + residual
        assert norm2 == np.sort(compensated.astype(np.float64) ** 2)[-20:].sum()
        shared = np.sort(rng.choice(500, size=20, replace=False))  # someone else's indices
        values = send_values_at(state, indices_record(shared, 500))
        assert PENDING_KEY not in state
        residual = ErrorFeedback.from_state(state, 500).residual
        sent = np.zeros(500, np.float32)
        sent[shared] = values
        np.testing.assert_array_equal(compensated, sent + residual)
