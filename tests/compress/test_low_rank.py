"""PowerSGD's maths: full rank is dense, the residual is what the approximation left, the
rank rule keeps to the ratio, and the warm start converges to the best rank-r matrix."""

from __future__ import annotations

import numpy as np
import pytest

from compress.low_rank import (
    approximation,
    first_factor,
    initial_q,
    matrix_shape,
    orthonormalise,
    rank_for,
    residual,
    second_factor,
)


def _clients(rows: int, cols: int, count: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(count)]


def _round(matrices: list[np.ndarray], q: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """One round over the clients: the orthonormal mean P and each client's own Q."""
    p_hat = orthonormalise(np.mean([first_factor(m, q) for m in matrices], axis=0))
    return p_hat, [second_factor(m, p_hat) for m in matrices]


@pytest.mark.parametrize(("rows", "cols"), [(6, 4), (4, 6), (5, 5)])
def test_at_full_rank_the_aggregate_is_the_dense_mean(rows: int, cols: int) -> None:
    matrices = _clients(rows, cols)
    p_hat, own = _round(matrices, initial_q(cols, min(rows, cols), seed=1))
    aggregate = approximation(p_hat, np.mean(own, axis=0))
    np.testing.assert_allclose(aggregate, np.mean(matrices, axis=0), atol=1e-5)


def test_the_round_is_linear_and_each_residual_is_what_its_approximation_left() -> None:
    matrices = _clients(8, 5)
    p_hat, own = _round(matrices, initial_q(5, 2, seed=3))
    # The compressed sum is the sum of the compressed: what makes it Allreduce-compatible.
    np.testing.assert_allclose(
        approximation(p_hat, np.mean(own, axis=0)),
        np.mean([approximation(p_hat, q) for q in own], axis=0),
        atol=1e-5,
    )
    for matrix, q in zip(matrices, own, strict=True):
        left = residual(matrix, p_hat, q)
        np.testing.assert_allclose(approximation(p_hat, q) + left, matrix, atol=1e-5)
        np.testing.assert_allclose(p_hat.T @ left, 0, atol=1e-4)  # nothing left along P̂
        assert np.linalg.norm(left) > 0.1  # rank 2 of 5: something is left


def test_orthonormal_columns_and_a_vanished_column_stays_zero() -> None:
    p = np.random.default_rng(0).standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_allclose(orthonormalise(p).T @ orthonormalise(p), np.eye(3), atol=1e-5)
    p[:, 1] = 0
    out = orthonormalise(p)
    assert np.all(np.isfinite(out)) and np.allclose(out[:, 1], 0)


def test_warm_started_rank_one_rounds_reach_the_best_rank_one_matrix() -> None:
    """One power-iteration step per round: with Q carried over, a fixed update's rank-1
    approximation approaches its truncated SVD, the best there is."""
    rng = np.random.default_rng(5)
    u, _, vt = np.linalg.svd(rng.standard_normal((10, 6)), full_matrices=False)
    matrix = (u @ np.diag([5.0, 2.0, 1.0, 0.5, 0.2, 0.1]) @ vt).astype(np.float32)
    best = 5.0 * np.outer(u[:, 0], vt[0])
    q = initial_q(6, 1, seed=0)
    errors = []
    for _ in range(8):
        p_hat, (q,) = _round([matrix], q)
        errors.append(float(np.linalg.norm(approximation(p_hat, q) - best)))
    assert errors[-1] < 1e-3 < errors[0]


def test_the_rank_keeps_to_the_ratio_and_shapes_map_to_matrices() -> None:
    for ratio, rows, cols in ((0.01, 64, 64), (0.1, 64, 32), (0.5, 10, 10), (0.9, 3, 7)):
        rank = rank_for(ratio, rows, cols)
        assert 1 <= rank <= min(rows, cols)
        assert rank == 1 or rank * (rows + cols) <= ratio * rows * cols
    assert rank_for(1.0, 100, 40) == 40  # a dense round sends the update whole
    assert rank_for(0.1, 64, 32) == 2  # floor(0.1 x 2048 / 96) = floor(2.13)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        rank_for(0.0, 4, 4)
    assert matrix_shape((16, 3, 3, 3)) == (16, 27)
    assert matrix_shape((10, 64)) == (10, 64)
    assert matrix_shape((10,)) is None and matrix_shape(()) is None
    np.testing.assert_array_equal(initial_q(5, 2, seed=4), initial_q(5, 2, seed=4))


def test_a_models_matrices_travel_as_factors_and_the_rest_dense() -> None:
    from compress.low_rank import Block, blocks
    from wire.layout import Layout

    layout = Layout(
        ("conv.weight", "bn.weight", "bn.running_mean", "fc.weight", "fc.bias"),
        ((4, 2, 3, 3), (4,), (4,), (10, 36), (10,)),
    )
    running_mean = np.arange(76, 80)  # a buffer, always sent whole
    matrices, dense = blocks(layout, running_mean)
    assert matrices == [Block(0, 4, 18), Block(80, 10, 36)]
    np.testing.assert_array_equal(dense, np.r_[72:80, 440:450])
    assert sum(b.size for b in matrices) + dense.size == layout.size
    vector = np.arange(layout.size, dtype=np.float32)
    view = matrices[1].of(vector)
    assert view.shape == (10, 36) and view[0, 0] == 80
    view[0, 0] = -1  # a view of the vector
    assert vector[80] == -1
    # A matrix that an always-sent position touches travels whole.
    matrices, dense = blocks(layout, np.array([3]))
    assert matrices == [Block(80, 10, 36)] and dense[:72].tolist() == list(range(72))
