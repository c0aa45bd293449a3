"""Error feedback over rounds: what a client computed = what the server decodes + residual."""

import numpy as np
from flwr.app import RecordDict

from collectives.allgather import Allgather
from collectives.allreduce import Allreduce
from collectives.allreduce.names import PENDING_KEY, TOPK_NORM2
from collectives.base import ClientAction
from compress.error_feedback import RESIDUAL_KEY, ErrorFeedback
from compress.float32 import Float32
from tests.helpers import client_job
from wire.codec import Sparse
from wire.phases import PhaseRequest


def test_allgather_invariant_compensated_equals_sent_plus_residual_over_rounds() -> None:
    rng = np.random.default_rng(0)
    state = RecordDict()
    assert RESIDUAL_KEY not in state
    residual = np.zeros(1000, np.float32)  # starts at zeros
    for _ in range(6):
        update = rng.standard_normal(1000).astype(np.float32)
        compensated = update + residual
        payload = Allgather.client_train(client_job(state, update, ratio=0.05))
        assert payload.sparse is not None
        sent = Sparse.from_record(payload.sparse, 1000, count=50)
        residual = ErrorFeedback.from_state(state, 1000).residual
        np.testing.assert_array_equal(compensated, sent.dense() + residual)
        assert np.count_nonzero(residual[sent.indices]) == 0
        # The sent entries are the 50 largest of e.
        assert np.abs(compensated[sent.indices]).min() >= np.abs(residual).max()


def test_shared_indices_invariant_residual_keeps_everything_else() -> None:
    rng = np.random.default_rng(1)
    state = RecordDict()
    residual = np.zeros(500, np.float32)
    for round_ in range(4):
        update = rng.standard_normal(500).astype(np.float32)
        payload = Allreduce.client_train(client_job(state, update, ratio=20 / 500))
        compensated = update + residual
        assert (
            payload.metrics[TOPK_NORM2] == np.sort(compensated.astype(np.float64) ** 2)[-20:].sum()
        )
        shared = np.sort(rng.choice(500, size=20, replace=False))  # someone else's indices
        request = PhaseRequest(round_ + 1, 20 / 500, shared, 500)
        action = ClientAction(
            state, request, request.to_content(), Float32(), np.random.default_rng(0)
        )
        record = Allreduce.client_actions["values"](action)
        assert PENDING_KEY not in state
        values = Float32().decode(record, 20)
        residual = ErrorFeedback.from_state(state, 500).residual
        sent = np.zeros(500, np.float32)
        sent[shared] = values
        np.testing.assert_array_equal(compensated, sent + residual)
