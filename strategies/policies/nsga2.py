"""Choosing the compression ratio c: statistical efficiency (gain) against parallel efficiency.

- ``gain_curve``: a client's compression gain ||TopK(e, c)||² / ||e||² at many ratios from one
  sort of its compensated update (no extra training, no probing).
- ``GainModel``: the server's EWMA of the reported gains and a monotone curve gain(c) over the
  ratio range (interpolated in log c, made non-decreasing, bounded in (0, 1]).
- ``Nsga2Schedule``: each round's ratio: a warm-up at ``compression-ratio``, then NSGA-II's
  choice (pareto.py: the front and the rule that picks a point), solved again when the links
  or the gain move, ramped up and never down by more than asked.
The strategy only asks a scheduler for the next ratio; pymoo stays behind pareto.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from collectives import COLLECTIVES
from collectives.base import SHARED_INDEX_GAIN
from compress.gain import DEFAULT_GAIN_GRID
from state.archive import StateError
from state.fields import Fields
from strategies.policies.pareto import SELECTIONS, Curve, RatioProblem, solve
from timing.cost import LinkLike
from timing.link_estimator import LinkEstimate


class GainModel:
    """EWMA of reported gains per grid ratio, and a monotone interpolated curve."""

    def __init__(self, grid: Sequence[float] = DEFAULT_GAIN_GRID, smoothing: float = 0.3) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.grid = np.asarray(grid, dtype=float)
        self.smoothing = smoothing
        self.smoothed: NDArray[np.float64] | None = None

    def load_smoothed(self, smoothed: NDArray[np.float64] | None) -> None:
        """A smoothed curve read back from state, checked against the grid."""
        ok = smoothed is None or (
            smoothed.shape == self.grid.shape and bool(np.all((smoothed >= 0) & (smoothed <= 1)))
        )
        if not ok:
            raise StateError(f"gain model: not {self.grid.size} gains in [0, 1]")
        self.smoothed = smoothed

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

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """What the schedule learnt: the gain curve, its choice and the target it ramps to,
        the shared-index factor, and what the last solve saw (links, gain, drift)."""
        links = self._links_at_solve
        return {
            "schema": self.STATE_SCHEMA,
            "gains": self.gain_model.smoothed,
            "ratio": self.ratio,
            "target": self.target,
            "collective": self.collective,
            "shared_index_factor": self.shared_index_factor,
            "links_at_solve": None
            if links is None
            else [[e.latency_s, e.uplink_bytes_per_s, e.downlink_bytes_per_s] for e in links],
            "gain_at_solve": self._gain_at_solve,
            "drifted_rounds": self._drifted_rounds,
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("NSGA-II schedule", state, self.STATE_SCHEMA)
        self.gain_model.load_smoothed(
            fields.optional_array("gains", "float64", (self.gain_model.grid.size,))
        )
        self.ratio = fields.number("ratio")
        self.target = fields.number("target")
        if not (0 < self.ratio <= 1 and 0 < self.target <= 1):
            raise StateError(
                f"NSGA-II schedule: ratio {self.ratio} or target {self.target} not in (0, 1]"
            )
        self.collective = fields.optional_text("collective")
        if self.collective is not None and self.collective not in self.params.collectives:
            raise StateError(
                f"NSGA-II schedule: collective {self.collective!r} is not one it models"
            )
        self.shared_index_factor = fields.optional_number("shared_index_factor")
        links = fields.raw("links_at_solve")
        self._links_at_solve = None if links is None else [_link(row) for row in links]
        self._gain_at_solve = fields.number("gain_at_solve", finite=False)
        self._drifted_rounds = fields.integer("drifted_rounds", least=0)
        fields.done()

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


def _link(row: object) -> LinkEstimate:
    """A link as the last solve saw it, checked."""
    try:
        return LinkEstimate.from_row(row)
    except ValueError:
        raise StateError(f"NSGA-II schedule: links_at_solve holds {row!r}, not a link") from None
