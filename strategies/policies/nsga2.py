"""Choosing the compression ratio c: statistical efficiency (gain) against parallel efficiency.

- ``gain_curve``: a client's compression gain ||TopK(e, c)||² / ||e||² at many ratios from one
  sort of its compensated update (no extra training, no probing).
- ``GainModel``: the server's EWMA of the reported gains and a monotone curve gain(c) over the
  ratio range (interpolated in log c, made non-decreasing, bounded in (0, 1]).
- ``RatioProblem``: pymoo problem over x = log10 c with two objectives, time and gain:
  ``progress`` (log10 of the predicted round time, −log10 gain(c)) or ``efficiency`` (the
  paper's 1 − PE(c), 1 − gain(c)).
- ``solve``: pymoo's NSGA-II, then one point of the front: ``progress`` (least predicted time
  per unit of progress), achievement scalarisation (``asf``, ``asf-front``) or the knee.
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

from compress.gain import DEFAULT_GAIN_GRID
from strategies.collectives import COLLECTIVES
from strategies.collectives.base import SHARED_INDEX_GAIN
from timing.cost import LinkLike


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


Curve = Callable[[NDArray[np.float64]], NDArray[np.float64]]  # ratios -> values


def efficiency_objectives(round_s: Curve, compute_s: float, gain: Curve) -> Curve:
    """The paper's [1 − PE(c), 1 − gain(c)], PE = compute / round time. Both lie in [0, 1],
    so 1 − PE saturates near 1 wherever rounds are communication-bound."""
    return lambda ratio: np.column_stack([1.0 - compute_s / round_s(ratio), 1.0 - gain(ratio)])


def progress_objectives(round_s: Curve, compute_s: float, gain: Curve) -> Curve:
    """[log10 round time(c), −log10 gain(c)]: seconds keep their scale (a round twice as long
    counts twice as much, however slow the link), and a weighted sum of the two is the log of
    time per unit of progress (``_progress``)."""
    return lambda ratio: np.column_stack([np.log10(round_s(ratio)), -np.log10(gain(ratio))])


class RatioProblem(Problem):
    """x = log10 c; F = objectives(c), two of them, both minimised."""

    def __init__(self, objectives: Curve, cr_min: float, cr_max: float) -> None:
        super().__init__(n_var=1, n_obj=2, xl=math.log10(cr_min), xu=math.log10(cr_max))
        self.objectives = objectives

    def _evaluate(self, x: NDArray[np.float64], out: dict, *args: object, **kwargs: object) -> None:
        out["F"] = self.objectives(10.0 ** x[:, 0])


@dataclass(frozen=True)
class Solution:
    ratio: float
    collective: str  # the collective whose front the chosen point lies on
    point: tuple[float, float]  # its objective values
    front_size: int
    solve_s: float  # wall clock
    front: NDArray[np.float64]  # (m, 2) objective values, for checks and plots
    front_ratios: NDArray[np.float64]
    front_collectives: tuple[str, ...]


def _nondominated(front: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mask of the points no other point dominates (minimisation)."""
    no_worse = np.all(front[None, :, :] <= front[:, None, :], axis=2)
    better = np.any(front[None, :, :] < front[:, None, :], axis=2)
    return ~np.any(no_worse & better, axis=1)


def solve(
    problem: RatioProblem | dict[str, RatioProblem],
    *,
    population: int = 40,
    offspring: int = 10,
    generations: int = 40,
    seed: int = 0,
    selection: str,
    weights: tuple[float, float],
) -> Solution:
    """NSGA-II (SBX p = 0.9, η = 15; PM η = 20) per collective, then one point of the front.

    With several collectives (``collective = "auto"``) each gets its own run and the point is
    taken from the non-dominated union of their fronts, so the choice of c and of the
    collective is one decision.
    ``progress``: the least weighted sum w0·F0 + w1·F1 of the progress objectives, that is
    the least round time / gain^(w1/w0): predicted time per unit of progress when rounds to a
    target scale as gain^−β, β = w1 / w0 (error feedback sends the rest later, so β < 1).
    ``asf``: achievement scalarisation of the efficiency objectives. Both are efficiencies
    in [0, 1] with the utopia at (0, 0), so the weights compare the same quantities from one
    solve to the next and the choice follows the links: when bytes get dear, 1 − PE rises at
    every c and the point moves to smaller c.
    ``asf-front`` (the paper's): the same after normalising by the front's own ideal and nadir.
    ``knee``: the point farthest from the line through the front's extremes.
    The last two are scale-free: rescaling an objective (a slower link) leaves the choice where
    it was. ``selection`` and ``weights`` have no defaults here: the settings
    (``cr-selection``, ``cr-weight-time``, ``cr-progress-exponent``) are their one source.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {tuple(SELECTIONS)}, got {selection!r}")
    problems = problem if isinstance(problem, dict) else {"any": problem}
    start = time.perf_counter()
    fronts, ratio_parts, labels = [], [], []
    for name, each in problems.items():
        algorithm = NSGA2(
            pop_size=population,
            n_offsprings=offspring,
            crossover=SBX(prob=0.9, eta=15),
            mutation=PM(eta=20),
            eliminate_duplicates=True,
        )
        result = minimize(each, algorithm, ("n_gen", generations), seed=seed, verbose=False)
        fronts.append(np.atleast_2d(result.F))
        ratio_parts.append(10.0 ** np.atleast_2d(result.X)[:, 0])
        labels += [name] * fronts[-1].shape[0]
    front, ratios = np.concatenate(fronts), np.concatenate(ratio_parts)
    names = np.asarray(labels)
    keep = _nondominated(front) if len(problems) > 1 else np.ones(len(front), dtype=bool)
    order = np.argsort(ratios[keep], kind="stable")
    front, ratios, names = front[keep][order], ratios[keep][order], names[keep][order]
    ideal, nadir = front.min(axis=0), front.max(axis=0)
    normalised = (front - ideal) / np.where(nadir > ideal, nadir - ideal, 1.0)
    index = SELECTIONS[selection].pick(front, normalised, weights)
    return Solution(
        ratio=float(ratios[index]),
        collective=str(names[index]),
        point=(float(front[index, 0]), float(front[index, 1])),
        front_size=int(front.shape[0]),
        solve_s=time.perf_counter() - start,
        front=front,
        front_ratios=ratios,
        front_collectives=tuple(str(n) for n in names),
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


def _progress(
    front: NDArray[np.float64], normalised: NDArray[np.float64], weights: tuple[float, float]
) -> int:
    return int((front @ np.asarray(weights)).argmin())


def _asf(
    front: NDArray[np.float64], normalised: NDArray[np.float64], weights: tuple[float, float]
) -> int:
    return int(ASF().do(front, 1.0 / np.asarray(weights)).argmin())


def _asf_front(
    front: NDArray[np.float64], normalised: NDArray[np.float64], weights: tuple[float, float]
) -> int:
    return int(ASF().do(normalised, 1.0 / np.asarray(weights)).argmin())


def _knee_point(
    front: NDArray[np.float64], normalised: NDArray[np.float64], weights: tuple[float, float]
) -> int:
    return _knee(normalised)


Pick = Callable[[NDArray[np.float64], NDArray[np.float64], tuple[float, float]], int]
Objectives = Callable[[Curve, float, Curve], Curve]  # (round_s, compute_s, gain) -> F(c)


@dataclass(frozen=True)
class Selection:
    objectives: Objectives  # what NSGA-II minimises
    pick: Pick  # the index of the chosen front point (front, normalised front, weights)
    weights: Callable[[float, float], tuple[float, float]]  # (weight on time, β) -> weights


def _time_and_gain(weight_time: float, exponent: float) -> tuple[float, float]:
    return (weight_time, 1.0 - weight_time)


def _progress_weights(weight_time: float, exponent: float) -> tuple[float, float]:
    return (1.0, exponent)


# cr-selection -> its objectives and how it picks a point of their front
SELECTIONS: dict[str, Selection] = {
    "progress": Selection(progress_objectives, _progress, _progress_weights),
    "asf": Selection(efficiency_objectives, _asf, _time_and_gain),
    "asf-front": Selection(efficiency_objectives, _asf_front, _time_and_gain),
    "knee": Selection(efficiency_objectives, _knee_point, _time_and_gain),
}


# --- the schedule the strategy asks for each round's ratio ----------------------------------

LINK_CHANGE = 0.25  # re-solve when the estimated links moved by more than this (relative)
GAIN_DRIFT = 0.10  # re-solve when the smoothed gain at the current ratio drifted by this
GAIN_DRIFT_ROUNDS = 3  # ... for this many rounds in a row (one noisy report is not a drift)


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
    collective: str
    parallel_efficiency: float
    gain: float
    solve_s: float  # wall clock
    shared_index_factor: float | None  # allreduce gain / own Top-k gain (None: not measured)
    # What the solve saw, at the gain grid's ratios inside [cr-min, cr-max]:
    grid_ratios: tuple[float, ...]
    grid_gains: tuple[float, ...]  # smoothed, monotone gain(c) of a client's own Top-k
    grid_round_s: dict[str, tuple[float, ...]]  # predicted round time at c per collective


PredictRoundS = Callable[[float], "dict[str, float] | None"]  # c -> seconds, by collective


def gain_model_of(collective: str) -> str | None:
    """How the schedule models a collective's gain (None: it has no model, so no front)."""
    half = COLLECTIVES.get(collective)
    return None if half is None else half.gain


@dataclass(frozen=True)
class Nsga2Params:
    """The schedule's hyperparameters (its state is the rest of ``Nsga2Schedule``)."""

    cr_min: float
    cr_max: float
    warmup_rounds: int
    population: int
    generations: int
    seed: int
    selection: str
    weights: tuple[float, float]  # on the two objectives (asf: time, gain; progress: 1, β)
    collectives: tuple[str, ...]  # whose fronts the choice is taken from
    # The largest factor c may rise by from one round to the next (0: no limit). A larger step
    # sends in one round what error feedback held back over many rounds at a smaller c:
    # measured, c from 0.007 to 0.079 in one round took the MLP from 0.94 to 0.30 accuracy
    # within 5 rounds (flexcomm, C1-edge, seed 1); with 2 it ended at 0.958
    # (docs/results/flexcomm.md).
    ratio_ramp: float = 0.0


class Nsga2Schedule:
    """Fixed ratio during warm-up, then NSGA-II whenever links or gains have moved enough.

    The gain of Allreduce-compatible Top-k is lower than a client's own Top-k gain: its values
    sit at the leader's indices. The schedule measures that share (``observe_shared_gain``) and
    scales the gain curve by it for the allreduce objective.
    """

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
        progress_exponent: float,
        collectives: Sequence[str],
        ratio_ramp: float = 0.0,
    ) -> None:
        if not 0 < cr_min < cr_max <= 1:
            raise ValueError(f"need 0 < cr-min < cr-max <= 1, got {cr_min}, {cr_max}")
        if ratio_ramp and ratio_ramp < 1:
            raise ValueError(f"cr-ratio-ramp must be 0 (off) or at least 1, got {ratio_ramp}")
        unmodelled = [name for name in collectives if gain_model_of(name) is None]
        if not collectives or unmodelled:
            raise ValueError(
                f"collectives must be ones whose gain the schedule models, not {unmodelled}"
            )
        self.params = Nsga2Params(
            cr_min=cr_min,
            cr_max=cr_max,
            warmup_rounds=warmup_rounds,
            population=population,
            generations=generations,
            seed=seed,
            selection=selection,
            weights=SELECTIONS[selection].weights(weight_time, progress_exponent),
            collectives=tuple(collectives),
            ratio_ramp=ratio_ramp,
        )
        self.gain_model = GainModel()
        self.ratio = initial_ratio  # this round's
        self.target = initial_ratio  # the last solve's choice, which ``ratio`` ramps up to
        self.collective: str | None = None  # None until the first solve decides
        self.shared_index_factor: float | None = None
        self._links_at_solve: list[LinkLike] | None = None
        self._gain_at_solve = math.nan
        self._drifted_rounds = 0  # consecutive rounds the gain has been beyond GAIN_DRIFT
        self.last_solve: SolveRecord | None = None

    def observe_gains(self, gains: Sequence[Sequence[float]], weights: Sequence[float]) -> None:
        if gains:
            self.gain_model.observe(gains, weights)

    def observe_shared_gain(self, factor: float) -> None:
        """One Allreduce round's mean ||e[I]||² / ||TopK(e)||² over clients (leader's I)."""
        if not 0 <= factor <= 1 + 1e-9:
            raise ValueError(f"shared-index gain factor must be in [0, 1], got {factor}")
        smoothing = self.gain_model.smoothing
        self.shared_index_factor = (
            factor
            if self.shared_index_factor is None
            else smoothing * factor + (1 - smoothing) * self.shared_index_factor
        )

    def _gain_of(self, collective: str) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
        curve = self.gain_model.curve()
        shared = gain_model_of(collective) == SHARED_INDEX_GAIN
        factor = self.shared_index_factor if shared else None
        if factor is None:
            return curve
        return lambda ratio: np.clip(factor * curve(ratio), 1e-9, 1.0)

    def _reason(self, links: Sequence[LinkLike]) -> str | None:
        if self._links_at_solve is None or self.collective is None:
            return "warm-up done"
        if _link_change(self._links_at_solve, links) > LINK_CHANGE:
            return "links changed"
        gain_now = float(self._gain_of(self.collective)(np.array([self.target]))[0])
        drifted = abs(gain_now / self._gain_at_solve - 1.0) > GAIN_DRIFT
        self._drifted_rounds = self._drifted_rounds + 1 if drifted else 0
        return "gain drifted" if self._drifted_rounds >= GAIN_DRIFT_ROUNDS else None

    def ratio_for(
        self,
        server_round: int,
        round_times: PredictRoundS,
        compute_s: float,
        links: Sequence[LinkLike] | None,
    ) -> float:
        """This round's ratio; solves again only when a trigger fires (``last_solve`` says).

        After the first solve ``collective`` names the collective the chosen point assumed.
        """
        self.last_solve = None
        if server_round <= self.params.warmup_rounds or self.gain_model.smoothed is None:
            return self.ratio
        if links is None or compute_s <= 0 or round_times(self.ratio) is None:
            return self._ramped()
        reason = self._reason(links)
        if reason is None:
            return self._ramped()

        def round_s(collective: str) -> Curve:
            def seconds(ratios: NDArray[np.float64]) -> NDArray[np.float64]:
                times = [round_times(float(c)) for c in ratios]
                return np.array([t[collective] if t else math.inf for t in times])

            return seconds

        objectives = SELECTIONS[self.params.selection].objectives
        problems = {
            name: RatioProblem(
                objectives(round_s(name), compute_s, self._gain_of(name)),
                self.params.cr_min,
                self.params.cr_max,
            )
            for name in self.params.collectives
        }
        solution = solve(
            problems,
            population=self.params.population,
            generations=self.params.generations,
            seed=self.params.seed,
            selection=self.params.selection,
            weights=self.params.weights,
        )
        self.target, self.collective = solution.ratio, solution.collective
        chosen = np.array([solution.ratio])
        gain = float(self._gain_of(solution.collective)(chosen)[0])
        self._links_at_solve = list(links)
        self._gain_at_solve = gain
        self._drifted_rounds = 0
        grid = self.gain_model.grid
        grid = grid[(grid >= self.params.cr_min) & (grid <= self.params.cr_max)]
        times = [round_times(float(c)) for c in grid]
        self.last_solve = SolveRecord(
            round=server_round,
            reason=reason,
            front_size=solution.front_size,
            ratio=solution.ratio,
            collective=solution.collective,
            parallel_efficiency=float(compute_s / round_s(solution.collective)(chosen)[0]),
            gain=gain,
            solve_s=solution.solve_s,
            shared_index_factor=self.shared_index_factor,
            grid_ratios=tuple(float(c) for c in grid),
            grid_gains=tuple(float(g) for g in self.gain_model.curve()(grid)),
            grid_round_s={
                name: tuple(float(t[name]) if t else math.inf for t in times)
                for name in self.params.collectives
            },
        )
        return self._ramped()

    def _ramped(self) -> float:
        """This round's ratio: the target at once when it is lower, else at most ``ratio_ramp`` x
        the last round's (0: at once)."""
        rise = self.params.ratio_ramp or math.inf
        self.ratio = min(self.target, self.ratio * rise)
        return self.ratio
