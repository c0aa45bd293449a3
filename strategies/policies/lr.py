"""Learning-rate scaling (``lr-scaling``): this round's learning rate from the last one's batch.

``linear`` multiplies the base rate by (global batch of the last round) / (batch-size ×
clients), the linear scaling rule on the batches clients actually used; with rate-sized
batches and one step per second this is ScaDLES' η·ΣS/B. ``lr-scale-max`` > 0 caps the factor:
the rule holds for moderately larger batches, and rounds that last seconds (a real deployment)
make rate batches, and so the factor, grow without bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from state.archive import StateError
from state.fields import Fields
from wire.fields import is_integer


@dataclass(frozen=True)
class LastRound:
    global_batch: int  # own samples per local step, summed over the clients aggregated
    batch_size: int  # the configured batch per client
    num_clients: int


def _none(base: float, last: LastRound, scale_max: float) -> float:
    return base


def _linear(base: float, last: LastRound, scale_max: float) -> float:
    scale = last.global_batch / (last.batch_size * last.num_clients)
    return base * (min(scale, scale_max) if scale_max > 0 else scale)


LR_SCALINGS: dict[str, Callable[[float, LastRound, float], float]] = {
    "none": _none,
    "linear": _linear,
}


def learning_rate(policy: str, base: float, last: LastRound | None, scale_max: float) -> float:
    """This round's learning rate (the base one until a round has reported its batches)."""
    return base if last is None else LR_SCALINGS[policy](base, last, scale_max)


@dataclass
class LearningRates:
    """``lr-scaling`` with its cap, and the batches of the last round that reported any."""

    policy: str
    scale_max: float = 0.0
    last: LastRound | None = None

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        last = self.last
        return {
            "schema": self.STATE_SCHEMA,
            "last": None
            if last is None
            else [last.global_batch, last.batch_size, last.num_clients],
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("learning rates", state, self.STATE_SCHEMA)
        last = fields.raw("last")
        fields.done()
        if last is None:
            self.last = None
            return
        if not (
            isinstance(last, list) and len(last) == 3 and all(is_integer(v) and v > 0 for v in last)
        ):
            raise StateError(f"learning rates: last {last!r} is not three positive integers")
        self.last = LastRound(*last)

    def for_round(self, base: float) -> float:
        return learning_rate(self.policy, base, self.last, self.scale_max)

    def observe(self, global_batch: int, batch_size: int, num_clients: int) -> None:
        self.last = LastRound(global_batch, batch_size, num_clients)

    def observe_aggregated(
        self, samples: list[int], local_steps: int, batch_size: int, num_clients: int
    ) -> None:
        """The global batch per local step of a round's own samples, over the replies
        aggregated (``samples``: each one's; a refused or screened reply sets nothing). It is
        estimated as the number of clients times the median of their samples: a sum would
        follow one client's inflated claim (up to local steps x batch-max passes the bounds),
        the median is moved by no minority of them."""
        median = float(np.median(samples))
        self.observe(round(len(samples) * median) // local_steps, batch_size, num_clients)
