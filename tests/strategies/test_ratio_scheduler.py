import numpy as np
import pytest

from strategies.codec import topk_count
from strategies.ratio_scheduler import GainModel, RatioProblem, gain_curve, solve
from strategies.topk import topk_energy, topk_indices

D = 50_826
GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def _update(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_t(df=3, size=D) * rng.uniform(0.1, 1, size=D)).astype(np.float32)


def test_gain_curve_matches_topk_and_is_monotone_and_bounded() -> None:
    e = _update(0)
    gains = gain_curve(e, GRID)
    for ratio, gain in zip(GRID, gains, strict=True):
        k = topk_count(D, ratio)
        assert gain == pytest.approx(
            topk_energy(e, topk_indices(e, k)) / float(e.astype(np.float64) @ e)
        )
    assert (
        all(0 < g <= 1 for g in gains)
        and gains == sorted(gains)
        and gains[-1] == pytest.approx(1.0)
    )


def test_smoothed_gain_model_is_monotone_and_bounded() -> None:
    model = GainModel(GRID)
    for r in range(5):
        model.observe([gain_curve(_update(10 * r + i), GRID) for i in range(3)], [1, 2, 1])
    curve = model.curve()
    ratios = np.logspace(-3, 0, 200)
    values = curve(ratios)
    assert np.all(np.diff(values) >= 0) and values.min() > 0 and values.max() <= 1


def _problem(bandwidth: float, latency: float = 0.01, compute: float = 0.05) -> RatioProblem:
    model = GainModel(GRID)
    model.observe([gain_curve(_update(1), GRID)], [1])

    def pe(ratio: np.ndarray) -> np.ndarray:
        sync = 2 * latency + 8 * np.ceil(ratio * D) / bandwidth  # values + int32 indices
        return compute / (compute + sync)

    return RatioProblem(pe, model.curve(), cr_min=0.001, cr_max=0.1)


def _nondominated(points: np.ndarray) -> np.ndarray:
    keep = []
    for point in points:
        no_worse = np.all(points <= point, axis=1)
        better = np.any(points < point, axis=1)
        keep.append(not np.any(no_worse & better))
    return points[np.array(keep)]


def test_front_agrees_with_a_dense_grid_within_tolerance() -> None:
    """Tolerance: every NSGA-II point within 0.01 (objective units) of the grid's front."""
    problem = _problem(bandwidth=1e6)
    solution = solve(problem, seed=1)
    x = np.linspace(problem.xl[0], problem.xu[0], 4000)[:, None]
    out: dict = {}
    problem._evaluate(x, out)
    grid_front = _nondominated(out["F"])
    distance = np.min(
        np.linalg.norm(solution.front[:, None, :] - grid_front[None, :, :], axis=2), axis=1
    )
    assert distance.max() < 0.01
    assert solution.front_size >= 10
    assert 0.001 <= solution.ratio <= 0.1


def test_ratio_follows_bandwidth_and_the_seed_fixes_the_schedule() -> None:
    low = solve(_problem(bandwidth=2e5), seed=3).ratio
    mid = solve(_problem(bandwidth=2e6), seed=3).ratio
    high = solve(_problem(bandwidth=2e7), seed=3).ratio
    assert low < mid < high
    again = solve(_problem(bandwidth=2e6), seed=3)
    assert again.ratio == mid
    asf = solve(_problem(bandwidth=2e6), seed=3, selection="asf")
    assert 0.001 <= asf.ratio <= 0.1
