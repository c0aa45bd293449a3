"""Where the global model's batch-norm statistics come from (``batch-norm-statistics``).

``averaged`` (the default): the clients' running statistics, taken at their own local weights
as they trained, averaged like any other entry (their deltas are sent whole every round).
``recomputed``: the server recomputes them at the new global weights on the validation split
(carved from the training data, so no test sample is read) and the step carries them, so the
replicas follow. A model without batch norm is unchanged by either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol

import numpy as np
from torch import nn

from collectives.base import DenseUpdate, Update, Vector
from common.batch_norm import recompute_statistics, statistics_positions
from common.data import ArrayData
from common.settings import Settings
from state.fields import Stateless
from wire.codec import Sparse


class StatisticsPolicy(Protocol):
    name: ClassVar[str]

    def settle(self, model: Vector, step: Update) -> Update:
        """``step`` (what the server adds to ``model`` this round) with the statistics' entries
        as this policy sets them."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: object) -> None: ...


class Averaged(Stateless):
    name: ClassVar[str] = "averaged"

    def settle(self, model: Vector, step: Update) -> Update:
        return step


class Recomputed(Stateless):
    name: ClassVar[str] = "recomputed"

    def __init__(self, model: nn.Module, validation: ArrayData | None) -> None:
        if validation is None:
            raise ValueError("batch-norm-statistics = 'recomputed' needs validation-fraction > 0")
        self.model, self.validation = model, validation
        self.positions = statistics_positions(model)

    def settle(self, model: Vector, step: Update) -> Update:
        if not self.positions.size:
            return step
        new = recompute_statistics(self.model, step.apply_to(model), self.validation)
        target = new[self.positions]
        if isinstance(step, DenseUpdate):
            vector = step.vector.copy()
            vector[self.positions] = target - model[self.positions]
            return DenseUpdate(vector)
        dense = step.dense()
        dense[self.positions] = target - model[self.positions]
        indices = np.union1d(step.indices, self.positions)
        return Sparse(indices, dense[indices], step.size)


# batch-norm-statistics -> the policy, given the server's model and its validation split
STATISTICS: dict[str, Callable[[nn.Module, ArrayData | None], StatisticsPolicy]] = {
    Averaged.name: lambda model, validation: Averaged(),
    Recomputed.name: Recomputed,
}


def check(settings: Settings) -> list[str]:
    """Statistics recomputed by the server need the server's validation split."""
    if settings.training.batch_norm_statistics == Recomputed.name and not (
        settings.data.validation_fraction > 0
    ):
        return [
            "batch-norm-statistics: recomputes statistics on the validation split, so it needs "
            "validation-fraction > 0"
        ]
    return []
