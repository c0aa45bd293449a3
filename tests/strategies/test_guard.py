"""The guard on the global model (strategies/guard.py): a round whose aggregate would destroy
the model is not applied, and the run goes on."""

from typing import Any

import numpy as np
import pytest
from flwr.app import Array, RecordDict

from collectives.base import DenseUpdate
from strategies.guard import UpdateGuard
from tests.helpers import RewriteRound, federation_settings, run_in_process
from wire.codec import Sparse
from wire.keys import ARRAYS_KEY


def test_an_update_far_larger_than_recent_ones_or_not_finite_is_refused() -> None:
    guard = UpdateGuard(factor=100.0, warmup=3)
    assert guard.refuse_update(DenseUpdate(np.full(4, 1e6, dtype=np.float32))) is None
    for norm in (1.0, 2.0, 3.0):  # before the warm-up, any finite size passes
        guard.applied(DenseUpdate(np.array([norm, 0.0], dtype=np.float32)))
    assert guard.refuse_update(DenseUpdate(np.array([200.0, 0.0], dtype=np.float32))) is None
    reason = guard.refuse_update(DenseUpdate(np.array([201.0, 0.0], dtype=np.float32)))
    assert reason is not None and "norm 201 exceeds 100 x the median of the last 3" in reason
    sparse = Sparse(np.array([1]), np.array([np.nan], dtype=np.float32), 4)
    assert guard.refuse_update(sparse) == "the aggregated update is not finite"
    assert guard.refuse_model(np.array([0.0, np.inf], dtype=np.float32)) is not None


def _scaled(factor: float) -> Any:
    """Every dense update times ``factor``: colluders that together pass a defence, or no
    defence at all."""

    def scale(content: RecordDict) -> None:
        record = content.array_records[ARRAYS_KEY]
        for name in list(record):
            record[name] = Array(record[name].numpy() * np.float32(factor))

    return scale


@pytest.mark.usefixtures("task_identity")
def test_a_round_that_would_blow_up_the_model_is_not_applied_and_the_run_goes_on() -> None:
    settings = federation_settings(robust="none")
    clean, _, _, _ = run_in_process(settings, rounds=6)
    attacked, strategy, _, stats = run_in_process(
        settings, rounds=6, grid=RewriteRound(settings, 5, _scaled(1e6))
    )
    (reason,) = stats[5].refused
    assert reason.startswith("round 5: the aggregated update's norm") and "not applied" in reason
    assert stats[6].refused == [] and stats[6].num_clients == 3
    assert np.isfinite(attacked).all()
    # Round 6 trained from round 4's model: not the clean run's, but near it.
    assert np.abs(attacked).max() < 2 * np.abs(clean).max()
