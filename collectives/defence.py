"""Where every collective's contributions meet the defence (strategies/policies/robust.py): the
strategy answers a program's ``Screen`` or ``Combine`` with ``defend``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from collectives.base import Indices, Participant, RoundPlan, Vector
from collectives.program import Combine, Defended, Screen
from wire.codec import Sparse


class Defence(Protocol):
    """Robust aggregation: how contributions are screened and combined."""

    @property
    def screens(self) -> bool: ...

    def screen(
        self, partitions: Sequence[int], vectors: Sequence[Vector], positions: Indices | None
    ) -> list[str | None]: ...

    def refusing(self) -> set[int]: ...

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector: ...

    def sparse_values(self, values: Sequence[Vector]) -> Sequence[Vector]: ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: object) -> None: ...


def defend(
    request: Screen | Combine, plan: RoundPlan, defence: Defence, screened_phases: set[str | None]
) -> Defended:
    """The strategy's answer to a program's Screen or Combine. ``screened_phases``: this
    round's, so far."""
    kept = request.participants
    if isinstance(request, Combine) and not request.judge:
        distrusted = defence.refusing()
        kept = [p for p in kept if p.partition_id not in distrusted]
    elif request.phase not in screened_phases:
        kept = screened(plan, defence, kept, request.phase, request.positions)
        screened_phases.add(request.phase)
    if isinstance(request, Screen) or not kept:
        return Defended(kept)
    contributions = [p.contribution for p in kept]
    if all(isinstance(c, Sparse) for c in contributions):
        values = [c.values for c in contributions]  # type: ignore[union-attr]
        return Defended(kept, values=list(defence.sparse_values(values)))
    combined = defence.combine(contributions, plan.weights(kept))  # type: ignore[arg-type]
    return Defended(kept, combined=combined)


def screened(
    plan: RoundPlan,
    defence: Defence,
    participants: list[Participant],
    phase: str | None,
    positions: Indices | None = None,
) -> list[Participant]:
    """The participants whose contributions the defence keeps; the rest refused in the log.
    ``positions``: where the contributions' entries sit in the model (None: the whole model)."""
    if not defence.screens or not participants:
        return participants
    vectors = []
    for p in participants:
        assert p.contribution is not None, "screened before the contributions came in"
        contribution = p.contribution
        vectors.append(contribution.dense() if isinstance(contribution, Sparse) else contribution)
    reasons = defence.screen([p.partition_id for p in participants], vectors, positions)
    for p, reason in zip(participants, reasons, strict=True):
        if reason is not None:
            plan.log.refuse(p.node_id, phase, reason)
    return [p for p, reason in zip(participants, reasons, strict=True) if reason is None]
