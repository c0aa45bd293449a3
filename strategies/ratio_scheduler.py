"""Choosing the compression ratio c: statistical efficiency (gain) against parallel efficiency.

- ``gain_curve``: a client's compression gain ||TopK(e, c)||² / ||e||² at many ratios from one
  sort of its compensated update (no extra training, no probing).
- ``GainModel``: the server's EWMA of the reported gains and a monotone curve gain(c) over the
  ratio range (interpolated in log c, made non-decreasing, bounded in (0, 1]).
- ``RatioProblem``: pymoo problem over x = log10 c, minimising 1 − PE(c) and 1 − gain(c).
- ``solve``: pymoo's NSGA-II, then one point of the front by knee or by achievement
  scalarisation (weights on time and gain).
The strategy only asks a scheduler for the next ratio; pymoo stays behind this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.problem import Problem
from pymoo.decomposition.asf import ASF
from pymoo.operators.crossover.sbx import SBX
from pymoo.operators.mutation.pm import PM
from pymoo.optimize import minimize

from strategies.cost_models import LinkLike

DEFAULT_GAIN_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def gain_curve(compensated: NDArray[np.float32], ratios: Sequence[float]) -> list[float]:
    """||TopK(e, c)||² / ||e||² for every c in ``ratios`` (1.0 for a zero vector)."""
    energy = np.sort((compensated.astype(np.float64)) ** 2)[::-1]
    total = float(energy.sum())
    if total == 0.0:
        return [1.0 for _ in ratios]
    cumulative = np.cumsum(energy)
    size = compensated.size
    return [
        min(1.0, float(cumulative[max(1, min(size, math.ceil(c * size))) - 1] / total))
        for c in ratios
    ]


class GainModel:
    """EWMA of reported gains per grid ratio, and a monotone interpolated curve."""

    def __init__(self, grid: Sequence[float] = DEFAULT_GAIN_GRID, smoothing: float = 0.3) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.grid = np.asarray(grid, dtype=float)
        self.smoothing = smoothing
        self.smoothed: NDArray[np.float64] | None = None

    def observe(self, gains: Sequence[Sequence[float]], weights: Sequence[float]) -> None:
        """One round's reports (one list per client, aligned with ``grid``)."""
        matrix = np.asarray(gains, dtype=float)
        if matrix.ndim != 2 or matrix.shape[1] != self.grid.size:
            raise ValueError(f"gain reports must have {self.grid.size} entries each")
        mean = np.average(matrix, axis=0, weights=np.asarray(weights, dtype=float))
        self.smoothed = (
            mean
            if self.smoothed is None
            else (self.smoothing * mean + (1 - self.smoothing) * self.smoothed)
        )

    def curve(self) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
        """gain(c): interpolation in log c of the monotone (running-max) smoothed gains."""
        if self.smoothed is None:
            raise RuntimeError("no gain observed yet")
        monotone = np.clip(np.maximum.accumulate(self.smoothed), 1e-9, 1.0)
        log_grid = np.log10(self.grid)

        def gain(ratio: NDArray[np.float64]) -> NDArray[np.float64]:
            return np.interp(np.log10(ratio), log_grid, monotone)

        return gain


class RatioProblem(Problem):
    """x = log10 c; F = [1 − PE(c), 1 − gain(c)]."""

    def __init__(
        self,
        parallel_efficiency: Callable[[NDArray[np.float64]], NDArray[np.float64]],
        gain: Callable[[NDArray[np.float64]], NDArray[np.float64]],
        cr_min: float,
        cr_max: float,
    ) -> None:
        super().__init__(n_var=1, n_obj=2, xl=math.log10(cr_min), xu=math.log10(cr_max))
        self.parallel_efficiency = parallel_efficiency
        self.gain = gain

    def _evaluate(self, x: NDArray[np.float64], out: dict, *args: object, **kwargs: object) -> None:
        ratio = 10.0 ** x[:, 0]
        out["F"] = np.column_stack([1.0 - self.parallel_efficiency(ratio), 1.0 - self.gain(ratio)])


@dataclass(frozen=True)
class Solution:
    ratio: float
    parallel_efficiency: float
    gain: float
    front_size: int
    solve_s: float  # wall clock
    front: NDArray[np.float64]  # (m, 2) objective values, for checks and plots
    front_ratios: NDArray[np.float64]


def solve(
    problem: RatioProblem,
    *,
    population: int = 40,
    offspring: int = 10,
    generations: int = 40,
    seed: int = 0,
    selection: str = "knee",
    weights: tuple[float, float] = (0.6, 0.4),
) -> Solution:
    """NSGA-II (SBX p = 0.9, η = 15; PM η = 20), then the knee or the ASF point of the front."""
    if selection not in ("knee", "asf"):
        raise ValueError(f"selection must be 'knee' or 'asf', got {selection!r}")
    start = time.perf_counter()
    algorithm = NSGA2(
        pop_size=population,
        n_offsprings=offspring,
        crossover=SBX(prob=0.9, eta=15),
        mutation=PM(eta=20),
        eliminate_duplicates=True,
    )
    result = minimize(problem, algorithm, ("n_gen", generations), seed=seed, verbose=False)
    front = np.atleast_2d(result.F)
    ratios = 10.0 ** np.atleast_2d(result.X)[:, 0]
    order = np.argsort(ratios)
    front, ratios = front[order], ratios[order]
    ideal, nadir = front.min(axis=0), front.max(axis=0)
    normalised = (front - ideal) / np.where(nadir > ideal, nadir - ideal, 1.0)
    if selection == "asf":
        index = int(ASF().do(normalised, 1.0 / np.asarray(weights)).argmin())
    else:
        index = _knee(normalised)
    return Solution(
        ratio=float(ratios[index]),
        parallel_efficiency=float(1.0 - front[index, 0]),
        gain=float(1.0 - front[index, 1]),
        front_size=int(front.shape[0]),
        solve_s=time.perf_counter() - start,
        front=front,
        front_ratios=ratios,
    )


def _knee(normalised: NDArray[np.float64]) -> int:
    """The front point farthest from the line through its two extremes (normalised)."""
    if normalised.shape[0] <= 2:
        return int(np.argmin(normalised.sum(axis=1)))
    a = normalised[np.argmin(normalised[:, 0])]
    b = normalised[np.argmin(normalised[:, 1])]
    direction = b - a
    length = float(np.hypot(*direction))
    if length == 0:
        return 0
    distance = np.abs(
        direction[0] * (normalised[:, 1] - a[1]) - direction[1] * (normalised[:, 0] - a[0])
    )
    return int(np.argmax(distance / length))


# --- the schedule the strategy asks for each round's ratio ----------------------------------

LINK_CHANGE = 0.25  # re-solve when the estimated links moved by more than this (relative)
GAIN_DRIFT = 0.10  # re-solve when the smoothed gain at the current ratio drifted by this


def _link_change(old: Sequence[LinkLike], new: Sequence[LinkLike]) -> float:
    """Median over clients of the largest relative change of latency or a bandwidth."""
    changes = []
    for a, b in zip(old, new, strict=True):
        pairs = (
            (a.latency_s, b.latency_s),
            (a.uplink_bytes_per_s, b.uplink_bytes_per_s),
            (a.downlink_bytes_per_s, b.downlink_bytes_per_s),
        )
        changes.append(max(abs(y / x - 1.0) if x > 0 else math.inf for x, y in pairs))
    return float(np.median(changes))


@dataclass(frozen=True)
class SolveRecord:
    round: int
    reason: str
    front_size: int
    ratio: float
    parallel_efficiency: float
    gain: float
    solve_s: float  # wall clock


class Nsga2Schedule:
    """Fixed ratio during warm-up, then NSGA-II whenever links or gains have moved enough."""

    def __init__(
        self,
        *,
        initial_ratio: float,
        cr_min: float,
        cr_max: float,
        warmup_rounds: int,
        population: int,
        generations: int,
        seed: int,
        selection: str,
        weight_time: float,
    ) -> None:
        if not 0 < cr_min < cr_max <= 1:
            raise ValueError(f"need 0 < cr-min < cr-max <= 1, got {cr_min}, {cr_max}")
        self.gain_model = GainModel()
        self.ratio = initial_ratio
        self.cr_min, self.cr_max = cr_min, cr_max
        self.warmup_rounds = warmup_rounds
        self.population, self.generations, self.seed = population, generations, seed
        self.selection, self.weights = selection, (weight_time, 1.0 - weight_time)
        self._links_at_solve: list[LinkLike] | None = None
        self._gain_at_solve = math.nan
        self.last_solve: SolveRecord | None = None

    def observe_gains(self, gains: Sequence[Sequence[float]], weights: Sequence[float]) -> None:
        if gains:
            self.gain_model.observe(gains, weights)

    def _reason(self, links: Sequence[LinkLike]) -> str | None:
        if self._links_at_solve is None:
            return "warm-up done"
        if _link_change(self._links_at_solve, links) > LINK_CHANGE:
            return "links changed"
        gain_now = float(self.gain_model.curve()(np.array([self.ratio]))[0])
        if abs(gain_now / self._gain_at_solve - 1.0) > GAIN_DRIFT:
            return "gain drifted"
        return None

    def ratio_for(
        self,
        server_round: int,
        round_time_at: Callable[[float], float | None],
        compute_s: float,
        links: Sequence[LinkLike] | None,
    ) -> float:
        """This round's ratio; solves again only when a trigger fires (``last_solve`` says)."""
        self.last_solve = None
        if server_round <= self.warmup_rounds or self.gain_model.smoothed is None:
            return self.ratio
        if links is None or compute_s <= 0 or round_time_at(self.ratio) is None:
            return self.ratio
        reason = self._reason(links)
        if reason is None:
            return self.ratio

        def parallel_efficiency(ratios: NDArray[np.float64]) -> NDArray[np.float64]:
            return np.array(
                [compute_s / float(round_time_at(float(c)) or math.inf) for c in ratios]
            )

        problem = RatioProblem(
            parallel_efficiency, self.gain_model.curve(), self.cr_min, self.cr_max
        )
        solution = solve(
            problem,
            population=self.population,
            generations=self.generations,
            seed=self.seed,
            selection=self.selection,
            weights=self.weights,
        )
        self.ratio = solution.ratio
        self._links_at_solve = list(links)
        self._gain_at_solve = solution.gain
        self.last_solve = SolveRecord(
            round=server_round,
            reason=reason,
            front_size=solution.front_size,
            ratio=solution.ratio,
            parallel_efficiency=solution.parallel_efficiency,
            gain=solution.gain,
            solve_s=solution.solve_s,
        )
        return self.ratio
