"""Online estimates of each client's link from the bytes and seconds of its recent messages.

Model: a transfer of b bytes takes α + b·β_dir seconds, the latency α shared by both
directions, β_up and β_down separate. Per client, the last ``window`` observations are fitted
by least squares on relative error (noise on times is multiplicative) with Huber reweighting,
so a few outliers do not pull the fit. Two observations in a row far off the current fit mean
the link changed: the window then restarts from them, so the estimate re-converges within a
few rounds. Where the sizes seen so far cannot separate α from β (one message size per
direction), α keeps its previous value and only the β are fitted.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from state.fields import Fields, int_keys
from wire.fields import is_integer, is_number

UP, DOWN = "up", "down"


@dataclass(frozen=True)
class LinkEstimate:
    latency_s: float
    uplink_bytes_per_s: float
    downlink_bytes_per_s: float

    def as_row(self) -> list[float]:
        """As state: [latency, uplink, downlink]."""
        return [self.latency_s, self.uplink_bytes_per_s, self.downlink_bytes_per_s]

    @classmethod
    def from_row(cls, row: Any) -> LinkEstimate:
        """``as_row``'s list read back, checked (ValueError naming it)."""
        ok = isinstance(row, list) and len(row) == 3 and _finite(row[0]) and row[0] >= 0
        if not ok or not all(_positive(v) for v in row[1:]):
            raise ValueError(f"{row!r} is not [latency >= 0, uplink > 0, downlink > 0]")
        return cls(float(row[0]), float(row[1]), float(row[2]))


@dataclass(frozen=True)
class _Observation:
    direction: str
    nbytes: int
    seconds: float


class LinkEstimator:
    """One estimate per client; ``observe`` as messages complete, ``estimate`` when deciding
    (the fits run then)."""

    def __init__(self, window: int = 24, change_factor: float = 3.0) -> None:
        if window < 4:
            raise ValueError(f"window must be >= 4, got {window}")
        self.window = window
        self.change_factor = change_factor
        self._observations: dict[int, deque[_Observation]] = {}
        self._estimates: dict[int, LinkEstimate] = {}
        self._surprises: dict[int, int] = {}
        # Observations not fitted yet, per client: a fit (a robust regression over the window)
        # runs when an estimate or the state is asked for, not on every message. Each client's
        # fits chain on its own earlier ones only, so fitting later, in order, gives the same
        # estimates; a run that never asks (a fixed ratio and collective) never fits.
        self._unfitted: dict[int, list[_Observation]] = {}

    def observe(self, client: int, direction: str, nbytes: int, seconds: float) -> None:
        if direction not in (UP, DOWN):
            raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
        if nbytes <= 0 or not (math.isfinite(seconds) and seconds > 0):
            return  # no message, or nothing measurable
        self._unfitted.setdefault(client, []).append(_Observation(direction, nbytes, seconds))

    def _fit_unfitted(self, client: int) -> None:
        for observation in self._unfitted.pop(client, []):
            self._fit_one(client, observation)

    def _fit_one(self, client: int, observation: _Observation) -> None:
        history = self._observations.setdefault(client, deque(maxlen=self.window))
        current = self._estimates.get(client)
        if current is not None and len(history) >= 4:
            error = abs(_predict(current, observation) / observation.seconds - 1.0)
            scale = self._relative_scale(client, current)
            if error > self.change_factor * scale + 0.1:
                self._surprises[client] = self._surprises.get(client, 0) + 1
            else:
                self._surprises[client] = 0
            if self._surprises[client] >= 2:  # the link changed: forget the old segment
                recent = list(history)[-1:]
                history.clear()
                history.extend(recent)
                self._surprises[client] = 0
        history.append(observation)
        self._estimates[client] = _fit(list(history), current)

    def _relative_scale(self, client: int, estimate: LinkEstimate) -> float:
        errors = [abs(_predict(estimate, o) / o.seconds - 1.0) for o in self._observations[client]]
        return 1.4826 * float(np.median(errors))

    def estimate(self, client: int) -> LinkEstimate | None:
        self._fit_unfitted(client)
        return self._estimates.get(client)

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """Each client's recent observations (direction, bytes, seconds), its fit and its run
        of surprises."""
        for client in list(self._unfitted):
            self._fit_unfitted(client)
        return {
            "schema": self.STATE_SCHEMA,
            "observations": int_keys(
                {
                    c: [[o.direction, o.nbytes, o.seconds] for o in h]
                    for c, h in self._observations.items()
                }
            ),
            "estimates": int_keys({c: e.as_row() for c, e in self._estimates.items()}),
            "surprises": int_keys(self._surprises),
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("link estimator", state, self.STATE_SCHEMA)

        def history(rows: object) -> deque[_Observation]:
            if not isinstance(rows, list) or len(rows) > self.window:
                raise ValueError(f"not a list of at most {self.window} observations")
            return deque((_observation(row) for row in rows), maxlen=self.window)

        self._observations = fields.int_map("observations", history)
        self._estimates = fields.int_map("estimates", LinkEstimate.from_row)
        self._surprises = fields.int_map("surprises", _count)
        fields.done()
        self._unfitted = {}


def _observation(row: Any) -> _Observation:
    ok = isinstance(row, list) and len(row) == 3 and row[0] in (UP, DOWN)
    if not ok or not _positive_int(row[1]) or not _positive(row[2]):
        raise ValueError(f"{row!r} is not [direction, bytes > 0, seconds > 0]")
    return _Observation(row[0], row[1], float(row[2]))


def _count(value: Any) -> int:
    if not (is_integer(value) and value >= 0):
        raise ValueError(f"{value!r} is not a count")
    return value


def _finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _finite(value) and value > 0


def _positive_int(value: Any) -> bool:
    return is_integer(value) and value > 0


def _predict(estimate: LinkEstimate, observation: _Observation) -> float:
    up = observation.direction == UP
    rate = estimate.uplink_bytes_per_s if up else estimate.downlink_bytes_per_s
    return estimate.latency_s + observation.nbytes / rate


def _fit(observations: list[_Observation], previous: LinkEstimate | None) -> LinkEstimate:
    t = np.array([o.seconds for o in observations])
    b = np.array([float(o.nbytes) for o in observations])
    up = np.array([o.direction == UP for o in observations])
    design = np.column_stack([np.ones_like(t), np.where(up, 0.0, b), np.where(up, b, 0.0)])
    keep_columns = [0] + [c for c in (1, 2) if np.any(design[:, c] > 0)]
    columns = design[:, keep_columns] / t[:, None]
    separable = np.linalg.matrix_rank(columns, tol=1e-9 * np.abs(columns).max()) == len(
        keep_columns
    )
    alpha_known = previous.latency_s if previous is not None else 0.0
    if separable and len(observations) >= len(keep_columns) + 1:
        coef = _huber_relative(design[:, keep_columns], t)
        alpha = coef[0]
        betas = dict(zip(keep_columns[1:], coef[1:], strict=True))
    else:
        alpha = alpha_known
        betas = {}
        for c in keep_columns[1:]:
            rows = design[:, c] > 0
            betas[c] = float(np.median((t[rows] - alpha) / b[rows]))
    alpha = max(0.0, float(alpha))
    rates = {}
    for c, name in ((1, DOWN), (2, UP)):
        beta = betas.get(c)
        if beta is None or not beta > 0:
            fallback = (
                None
                if previous is None
                else (
                    previous.downlink_bytes_per_s if name == DOWN else previous.uplink_bytes_per_s
                )
            )
            rates[name] = fallback if fallback is not None else math.inf
        else:
            rates[name] = 1.0 / beta
    return LinkEstimate(alpha, rates[UP], rates[DOWN])


def _huber_relative(design: np.ndarray, t: np.ndarray, iterations: int = 8) -> np.ndarray:
    """Least squares on t_hat / t − 1 with Huber weights (k = 1.345 robust scales)."""
    weights = np.ones_like(t)
    coef = np.zeros(design.shape[1])
    for _ in range(iterations):
        scale = weights / t
        coef, *_ = np.linalg.lstsq(design * scale[:, None], t * scale, rcond=None)
        residual = (design @ coef) / t - 1.0
        spread = 1.4826 * float(np.median(np.abs(residual))) + 1e-12
        ratio = np.abs(residual) / (1.345 * spread)
        weights = np.where(ratio <= 1.0, 1.0, 1.0 / np.maximum(ratio, 1e-12))
    return coef
