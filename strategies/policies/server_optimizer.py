"""Server optimizers on the aggregated update, as Flower users know them: FedAvgM, FedAdam and
FedYogi (Reddi et al., "Adaptive Federated Optimization", ICLR 2021; Flower's strategies of
those names).

The aggregate Δ (the clients' weighted mean update, dense or compressed) is the negative of
the round's pseudo-gradient. ``sgd`` applies η·Δ, and at η = 1 exactly Δ (the default:
records as before). The others keep moments at the server and step every coordinate, so
under Top-k the step is dense even where Δ is sparse: it travels to the replicas as a delta
over the whole model (bit for bit what the server applies). Error feedback at the clients is
unchanged, whatever the server does with Δ. A model's buffers (batch-norm statistics,
counters: ``plain``) are moving averages, not gradients, so they always take Δ as it is: a
momentum or a scaled step would overshoot them (a running variance below zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

from collectives.base import DenseUpdate, Indices, Update
from state.archive import StateError
from state.fields import Fields, Stateless
from wire.codec import Sparse

Moments = NDArray[np.float64]


@dataclass(frozen=True)
class ServerStepSettings:
    learning_rate: float  # η
    momentum: float  # FedAvgM's β
    beta1: float  # FedAdam and FedYogi: first moment
    beta2: float  # second moment
    tau: float  # adaptivity: the smallest denominator


class ServerOptimizer(Protocol):
    name: ClassVar[str]

    def step(self, delta: Update) -> Update:
        """What to add to the global model, given this round's aggregate ``delta``."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: object, size: int) -> None:
        """``size``: the model's length, the moments' too."""
        ...


def _dense(delta: Update) -> Moments:
    return (delta.dense() if isinstance(delta, Sparse) else delta.vector).astype(np.float64)


def _like(delta: Update, step: Moments, plain: Indices) -> Update:
    """``step`` in the kind of ``delta`` (a compressed round's replicas follow a Sparse), with
    the aggregate itself at the ``plain`` positions."""
    values = step.astype(np.float32)
    if plain.size:
        values[plain] = _dense(delta)[plain].astype(np.float32)
    if isinstance(delta, Sparse):
        return Sparse(np.arange(delta.size, dtype=np.int64), values, delta.size)
    return DenseUpdate(values)


class AsAggregated:
    """FedAvg's server step: η·Δ (at η = 1 the aggregate itself, untouched)."""

    name: ClassVar[str] = "sgd"

    def __init__(self, settings: ServerStepSettings, plain: Indices) -> None:
        self.learning_rate, self.plain = settings.learning_rate, plain

    def state_dict(self) -> dict[str, object]:
        return Stateless().state_dict()

    def load_state_dict(self, state: object, size: int) -> None:
        Fields(self.name, state, Stateless.STATE_SCHEMA).done()

    def step(self, delta: Update) -> Update:
        if self.learning_rate == 1.0:
            return delta
        size = delta.size if isinstance(delta, Sparse) else delta.vector.size
        rate = np.full(size, np.float32(self.learning_rate), dtype=np.float32)
        rate[self.plain] = 1.0
        if isinstance(delta, Sparse):
            return Sparse(delta.indices, delta.values * rate[delta.indices], delta.size)
        return DenseUpdate(delta.vector * rate)


class Momentum:
    """FedAvgM (Hsu et al. 2019; Flower's FedAvgM): m ← β·m + Δ, step η·m (m = Δ at first)."""

    name: ClassVar[str] = "fedavgm"

    def __init__(self, settings: ServerStepSettings, plain: Indices) -> None:
        self.learning_rate, self.momentum = settings.learning_rate, settings.momentum
        self.plain = plain
        self.velocity: Moments | None = None

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {"schema": self.STATE_SCHEMA, "velocity": self.velocity}

    def load_state_dict(self, state: object, size: int) -> None:
        fields = Fields(self.name, state, self.STATE_SCHEMA)
        self.velocity = fields.optional_array("velocity", "float64", (size,))
        fields.done()

    def step(self, delta: Update) -> Update:
        d = _dense(delta)
        self.velocity = d if self.velocity is None else self.momentum * self.velocity + d
        return _like(delta, self.learning_rate * self.velocity, self.plain)


class Adam:
    """FedAdam (Reddi et al.): m ← β1·m + (1 − β1)·Δ, v ← β2·v + (1 − β2)·Δ², step
    η_t·m / (√v + τ), with Kingma and Ba's bias correction η_t = η·√(1 − β2^t) / (1 − β1^t),
    t counting steps from 1 (Flower's FedAdam corrects with t + 1; Reddi et al. do not)."""

    name: ClassVar[str] = "fedadam"

    def __init__(self, settings: ServerStepSettings, plain: Indices) -> None:
        self.settings, self.plain = settings, plain
        self.rounds = 0
        self.first: Moments | None = None
        self.second: Moments | None = None

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {
            "schema": self.STATE_SCHEMA,
            "rounds": self.rounds,
            "first": self.first,
            "second": self.second,
        }

    def load_state_dict(self, state: object, size: int) -> None:
        fields = Fields(self.name, state, self.STATE_SCHEMA)
        self.rounds = fields.integer("rounds", least=0)
        self.first = fields.optional_array("first", "float64", (size,))
        self.second = fields.optional_array("second", "float64", (size,))
        fields.done()
        if (self.first is None) != (self.rounds == 0) or (self.second is None) != (
            self.rounds == 0
        ):
            raise StateError(f"{self.name}: moments and rounds ({self.rounds}) disagree")

    def _second(self, second: Moments, squared: Moments) -> Moments:
        beta2 = self.settings.beta2
        return beta2 * second + (1.0 - beta2) * squared

    def _step_size(self) -> float:
        s = self.settings
        return s.learning_rate * np.sqrt(1.0 - s.beta2**self.rounds) / (1.0 - s.beta1**self.rounds)

    def step(self, delta: Update) -> Update:
        s, d = self.settings, _dense(delta)
        self.rounds += 1
        first = np.zeros_like(d) if self.first is None else self.first
        second = np.zeros_like(d) if self.second is None else self.second
        self.first = s.beta1 * first + (1.0 - s.beta1) * d
        self.second = self._second(second, d * d)
        step = self._step_size() * self.first / (np.sqrt(self.second) + s.tau)
        return _like(delta, step, self.plain)


class Yogi(Adam):
    """FedYogi (Reddi et al.; Flower's FedYogi): Adam whose second moment moves additively,
    v ← v − (1 − β2)·Δ²·sign(v − Δ²), and whose step size is η without bias correction."""

    name: ClassVar[str] = "fedyogi"

    def _second(self, second: Moments, squared: Moments) -> Moments:
        return second - (1.0 - self.settings.beta2) * squared * np.sign(second - squared)

    def _step_size(self) -> float:
        return self.settings.learning_rate


SERVER_OPTIMIZERS: dict[str, type[AsAggregated | Momentum | Adam]] = {
    optimizer.name: optimizer for optimizer in (AsAggregated, Momentum, Adam, Yogi)
}
