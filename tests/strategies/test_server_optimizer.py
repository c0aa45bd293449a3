"""Server optimizers on the aggregate (strategies/policies/server_optimizer.py)."""

import numpy as np
import pytest

from collectives.base import DenseUpdate
from strategies.policies.server_optimizer import (
    SERVER_OPTIMIZERS,
    Adam,
    AsAggregated,
    Momentum,
    ServerStepSettings,
    Yogi,
)
from tests.helpers import assert_replicas_hold_the_model_before_last
from wire.codec import Sparse

REDDI = ServerStepSettings(learning_rate=0.1, momentum=0.9, beta1=0.9, beta2=0.99, tau=1e-3)
NO_BUFFERS = np.zeros(0, dtype=np.int64)


def _dense(*values: float) -> DenseUpdate:
    return DenseUpdate(np.array(values, dtype=np.float32))


def test_sgd_at_rate_one_is_the_aggregate_itself() -> None:
    delta = _dense(1.0, -2.0)
    whole = AsAggregated(ServerStepSettings(1.0, 0.9, 0.9, 0.99, 1e-3), NO_BUFFERS)
    assert whole.step(delta) is delta
    halved = AsAggregated(ServerStepSettings(0.5, 0.9, 0.9, 0.99, 1e-3), NO_BUFFERS).step(delta)
    assert isinstance(halved, DenseUpdate)
    np.testing.assert_array_equal(halved.vector, [0.5, -1.0])


def test_momentum_accumulates_the_aggregates() -> None:
    optimizer = Momentum(REDDI, NO_BUFFERS)
    first = optimizer.step(_dense(1.0, -2.0))
    second = optimizer.step(_dense(1.0, 0.0))
    assert isinstance(first, DenseUpdate) and isinstance(second, DenseUpdate)
    np.testing.assert_allclose(first.vector, [0.1, -0.2])  # m = Δ in the first round
    np.testing.assert_allclose(second.vector, [0.1 * 1.9, 0.1 * -1.8])  # m = 0.9 m + Δ


def test_adam_by_hand() -> None:
    """Round 1: m = 0.1 Δ, v = 0.01 Δ², η_1 = η √(1 − β2) / (1 − β1) = η."""
    step = Adam(REDDI, NO_BUFFERS).step(_dense(1.0, -2.0))
    assert isinstance(step, DenseUpdate)
    np.testing.assert_allclose(step.vector, [0.1 * 0.1 / 0.101, 0.1 * -0.2 / 0.201], rtol=1e-6)


def test_yogi_moves_its_second_moment_additively() -> None:
    optimizer = Yogi(REDDI, NO_BUFFERS)
    optimizer.step(_dense(1.0, -2.0))  # v from 0: v − 0.01 Δ² sign(0 − Δ²) = 0.01 Δ²
    assert optimizer.second is not None
    np.testing.assert_allclose(optimizer.second, [0.01, 0.04])
    step = optimizer.step(_dense(0.0, 0.0))  # v > 0 = Δ²: unchanged; m decays
    np.testing.assert_allclose(optimizer.second, [0.01, 0.04])
    assert isinstance(step, DenseUpdate)
    np.testing.assert_allclose(step.vector, [0.1 * 0.09 / 0.101, 0.1 * -0.18 / 0.201], rtol=1e-6)


@pytest.mark.parametrize("name", ["fedavgm", "fedadam", "fedyogi"])
def test_a_sparse_aggregate_gives_a_step_over_every_coordinate(name: str) -> None:
    optimizer = SERVER_OPTIMIZERS[name](REDDI, NO_BUFFERS)
    optimizer.step(Sparse(np.array([0, 3]), np.array([1.0, -1.0], dtype=np.float32), 5))
    step = optimizer.step(Sparse(np.array([1]), np.array([2.0], dtype=np.float32), 5))
    assert isinstance(step, Sparse)
    np.testing.assert_array_equal(step.indices, np.arange(5))
    assert step.values.dtype == np.float32
    assert np.count_nonzero(step.values) == 3  # the moments carry round 1's coordinates on


@pytest.mark.usefixtures("task_identity")
def test_momentum_zero_is_plain_averaging_bit_for_bit() -> None:
    """FedAvgM with β = 0 and η = 1 adds the aggregate, as sgd does: the same model."""
    from tests.helpers import federation_settings, run_in_process

    plain, _, _, _ = run_in_process(
        federation_settings(collective="allgather", compression_ratio=0.05), rounds=3
    )
    momentum, _, _, _ = run_in_process(
        federation_settings(
            collective="allgather",
            compression_ratio=0.05,
            server_optimizer="fedavgm",
            server_momentum=0.0,
        ),
        rounds=3,
    )
    np.testing.assert_array_equal(momentum, plain)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_replicas_follow_an_adaptive_server_step_bit_for_bit(collective: str) -> None:
    """FedAdam's step covers every coordinate: it goes down as a delta over the whole model,
    and every replica equals the global model the clients trained from."""
    from tests.helpers import federation_settings, run_in_process

    settings = federation_settings(
        collective=collective,
        compression_ratio=0.05,
        server_optimizer="fedadam",
        server_learning_rate=0.01,
    )
    final, strategy, grid, stats = run_in_process(settings, rounds=4)
    delta = strategy.replicas.last_delta
    assert delta is not None and delta.indices.size == final.size  # dense
    assert_replicas_hold_the_model_before_last(strategy, grid, final)
    assert not any(stats[r].refused for r in range(1, 5))


@pytest.mark.parametrize("name", ["sgd", "fedavgm", "fedadam", "fedyogi"])
def test_buffers_take_the_aggregate_as_it_is(name: str) -> None:
    """Batch-norm statistics are moving averages: a momentum or an adaptive step would carry
    a falling running variance below zero. At the buffers' positions the step is Δ."""
    buffers = np.array([1, 3], dtype=np.int64)
    settings = ServerStepSettings(0.5, 0.9, 0.9, 0.99, 1e-3)
    optimizer = SERVER_OPTIMIZERS[name](settings, buffers)
    for _ in range(3):
        delta = _dense(0.2, -0.3, 0.4, -0.5)
        step = optimizer.step(delta)
        assert isinstance(step, DenseUpdate)
        np.testing.assert_array_equal(step.vector[buffers], delta.vector[buffers])
        assert not np.array_equal(step.vector[[0, 2]], [0.2, 0.4])  # the weights: the optimizer's
