"""What the strategy decides by (``Policies``) and one round between its two halves
(``RoundState``: made by ``configure_train``, read by ``aggregate_train``)."""

from __future__ import annotations

from dataclasses import dataclass

from flwr.serverapp import Grid

from strategies.collectives.base import AggregationWeights, Collective, RoundPlan, Vector
from strategies.collectives.defence import Defence
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
