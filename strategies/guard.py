"""A guard on the global model: one bad round must not destroy it.

Before the server applies a round's aggregated update it checks it: every value finite, and its
norm at most ``factor`` times the median norm of the last ``window`` updates applied (once
``warmup`` are known). After the step it checks that the new model is finite. A round that
fails is not applied: the model, and every replica, stays as it was, and the round's record
says why among its refused replies. The defences screen single replies; this catches what they
let through together (colluders, a server optimizer driven out of range).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from collectives.base import DenseUpdate, Update, Vector
from state.archive import StateError
from state.fields import Fields


@dataclass
class UpdateGuard:
    factor: float = 100.0  # far above the round-to-round change of honest updates
    window: int = 10
    warmup: int = 3
    norms: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.norms = deque(self.norms, maxlen=self.window)

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {"schema": self.STATE_SCHEMA, "norms": list(self.norms)}

    def load_state_dict(self, state: object) -> None:
        fields = Fields("update guard", state, self.STATE_SCHEMA)
        norms = fields.numbers("norms")
        if len(norms) > self.window or any(n < 0 for n in norms):
            raise StateError(f"update guard: norms holds {len(norms)} of at most {self.window}")
        self.norms = deque(norms, maxlen=self.window)
        fields.done()

    def refuse_update(self, update: Update) -> str | None:
        """Why ``update`` must not be applied, or None."""
        values = update.vector if isinstance(update, DenseUpdate) else update.values
        if not np.isfinite(values).all():
            return "the aggregated update is not finite"
        norm = float(np.linalg.norm(values.astype(np.float64)))
        if len(self.norms) >= self.warmup:
            typical = float(np.median(self.norms))
            if norm > self.factor * typical > 0:
                return (
                    f"the aggregated update's norm {norm:.3g} exceeds {self.factor:g} x the "
                    f"median of the last {len(self.norms)} applied ({typical:.3g})"
                )
        return None

    @staticmethod
    def refuse_model(model: Vector) -> str | None:
        return None if np.isfinite(model).all() else "the new global model is not finite"

    def applied(self, update: Update) -> None:
        values = update.vector if isinstance(update, DenseUpdate) else update.values
        self.norms.append(float(np.linalg.norm(values.astype(np.float64))))
