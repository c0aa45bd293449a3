"""What the strategy decides by (``Policies``) and one round between its two halves
(``RoundState``: made by ``configure_train``, read by ``aggregate_train``)."""

from __future__ import annotations

from dataclasses import dataclass

from flwr.serverapp import Grid

from collectives.base import AggregationWeights, Collective, RoundPlan, Vector
from collectives.defence import Defence
from state.fields import Fields
from strategies.ledger import RoundStats
from strategies.policies.collective import AutoCollective, FixedCollective
from strategies.policies.lr import LearningRates
from strategies.policies.ratio import RatioPolicy
from strategies.policies.server_optimizer import ServerOptimizer
from strategies.policies.statistics import StatisticsPolicy


@dataclass(frozen=True)
class Policies:
    """What the strategy decides by: each a table entry chosen from the settings."""

    ratio: RatioPolicy
    collective: FixedCollective | AutoCollective
    weights: AggregationWeights
    learning_rates: LearningRates
    defence: Defence
    server_optimizer: ServerOptimizer
    statistics: StatisticsPolicy

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """Each policy's own (the weights are a function of the round: none)."""
        return {
            "schema": self.STATE_SCHEMA,
            "ratio": self.ratio.state_dict(),
            "collective": self.collective.state_dict(),
            "learning_rates": self.learning_rates.state_dict(),
            "defence": self.defence.state_dict(),
            "server_optimizer": self.server_optimizer.state_dict(),
            "statistics": self.statistics.state_dict(),
        }

    def load_state_dict(self, state: object, size: int) -> None:
        fields = Fields("policies", state, self.STATE_SCHEMA)
        self.ratio.load_state_dict(fields.raw("ratio"))
        self.collective.load_state_dict(fields.raw("collective"))
        self.learning_rates.load_state_dict(fields.raw("learning_rates"))
        self.defence.load_state_dict(fields.raw("defence"))
        self.server_optimizer.load_state_dict(fields.raw("server_optimizer"), size)
        self.statistics.load_state_dict(fields.raw("statistics"))
        fields.done()


@dataclass
class RoundState:
    """The round between ``configure_train`` and ``aggregate_train``."""

    server_round: int
    grid: Grid
    model: Vector  # the global model the round starts from
    collective: Collective
    ratio: float
    learning_rate: float
    local_steps: int
    batch_size: int
    bytes_down: dict[int, int]  # node -> bytes of its training instruction
    plan: RoundPlan
    model_payloads: dict[str, int] | None  # compressed: nodes per replica payload kind
    sampling: dict[str, object] | None = None  # clients-per-round: partitions, identify query
    connected: frozenset[int] = frozenset()  # every node connected, sampled or not
    stats: RoundStats | None = None  # the round's figures, once it is recorded
