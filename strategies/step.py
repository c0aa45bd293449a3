"""A round's step on the global model: the server optimizer's step on the aggregate, with the
batch-norm statistics as their policy sets them, unless the guard refuses the update or the
model it would make (strategies/guard.py): then the model stays as it was, and the record
says why."""

from __future__ import annotations

from logging import WARNING

from flwr.common import log

from collectives.base import Aggregate, Update, Vector
from strategies.guard import UpdateGuard
from strategies.round_state import Policies, RoundState


def apply_step(
    state: RoundState, aggregate: Aggregate, policies: Policies, guard: UpdateGuard
) -> tuple[Vector, Update | None]:
    """The new global model and the step applied (None: none was)."""
    delta = aggregate.update if aggregate.participants else None
    model, applied = state.model, None
    refusal = None if delta is None else guard.refuse_update(delta)
    if delta is not None and refusal is None:
        step = policies.server_optimizer.step(delta)
        applied = policies.statistics.settle(state.model, step)
        model = applied.apply_to(state.model)
        refusal = guard.refuse_model(model)
    if refusal is not None:
        model, applied = state.model, None
        state.plan.log.refused.append(f"round {state.server_round}: {refusal}; not applied")
        log(WARNING, "edgeflex: round %d not applied: %s", state.server_round, refusal)
    elif delta is not None:
        guard.applied(delta)
    return model, applied
