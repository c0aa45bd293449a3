"""NSGA-II's front over (time, gain) and the rules that pick one point of it (``cr-selection``).

- ``RatioProblem``: pymoo problem over x = log10 c with two objectives, time and gain:
  ``progress`` (log10 of the predicted round time, −log10 gain(c)) or ``efficiency`` (the
  paper's 1 − PE(c), 1 − gain(c)).
- ``solve``: pymoo's NSGA-II, then one point of the front: ``progress`` (least predicted time
  per unit of progress), achievement scalarisation (``asf``, ``asf-front``) or the knee.
pymoo stays behind this module and the schedule (nsga2.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.problem import Problem
from pymoo.decomposition.asf import ASF
from pymoo.operators.crossover.sbx import SBX
from pymoo.operators.mutation.pm import PM
from pymoo.optimize import minimize

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
