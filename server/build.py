"""The composition root: the run's settings turned into its parts (the model and its layout, the
data the server evaluates on, the virtual clock, the strategy and its policies), each chosen
from its table. A module that does maths does not read the run config; this one turns
settings into the arguments of those modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch import nn

from collectives import COLLECTIVES
from collectives.base import Indices, whole_entries
from common.batches import largest_batch
from common.data import ArrayData, data_spec, server_test_split, server_validation_split
from common.models import build_model
from common.params import buffer_positions, model_to_vector
from common.rates import STREAM_OFF, rate_span
from common.settings import PROJECT_ROOT, Settings
from common.workload import Workload, check_workload
from compress import ENCODINGS, SELECTORS
from strategies.bounds import Bounds
from strategies.edge import EdgeStrategy, LocalTraining
from strategies.ledger import Ledger
from strategies.policies.collective import (
    AUTO,
    AutoCollective,
    FixedCollective,
    auto_candidates,
    run_collectives,
)
from strategies.policies.lr import LearningRates
from strategies.policies.ratio import ratio_policy
from strategies.policies.robust import DEFENCES
from strategies.policies.round_times import RoundTimes
from strategies.policies.server_optimizer import (
    SERVER_OPTIMIZERS,
    AsAggregated,
    ServerOptimizer,
    ServerStepSettings,
)
from strategies.policies.statistics import STATISTICS, Averaged, StatisticsPolicy
from strategies.policies.weights import WEIGHTS
from strategies.relay import InjectionPlan, Relay
from strategies.round_state import Policies
from strategies.sampling import ClientSampler
from timing.clock import ServerLink, VirtualClock
from timing.devices import load_catalog
from timing.network import load_schedule
from wire.layout import Layout


def server_optimizer(settings: Settings, buffers: Indices) -> ServerOptimizer:
    """The server-optimizer table's entry, with the step settings it reads; ``buffers`` (the
    model's, by position) take the aggregate as it is."""
    training = settings.training
    step = ServerStepSettings(
        learning_rate=training.server_learning_rate,
        momentum=training.server_momentum,
        beta1=training.server_beta1,
        beta2=training.server_beta2,
        tau=training.server_tau,
    )
    return SERVER_OPTIMIZERS[training.server_optimizer](step, buffers)


def step_is_aggregate(settings: Settings) -> bool:
    """Whether the server applies each round's aggregate as it is: FedAvg's step at rate 1,
    with the clients' own batch-norm statistics."""
    training = settings.training
    return (
        SERVER_OPTIMIZERS[training.server_optimizer] is AsAggregated
        and training.server_learning_rate == 1.0
        and training.batch_norm_statistics == Averaged.name
    )


def bounds(settings: Settings) -> Bounds:
    """What the server can justify of clients' reports in this run (strategies/bounds.py)."""
    max_batch = largest_batch(settings)
    timeout, capacity = settings.run.round_timeout_s, settings.streams.buffer_capacity
    sample_bytes = 4 * data_spec(settings).num_features + 8  # common.data.ArrayData
    rates = settings.streams.stream_rates
    if rates == STREAM_OFF:
        return Bounds(max_batch, math.inf, 0.0, timeout, capacity, sample_bytes)
    slowest, fastest = rate_span(rates, settings.run.num_clients)
    if settings.timing.timing == "measured":
        longest = timeout  # a reply that waited longer missed the round
    else:
        longest = settings.training.local_steps * max_batch / slowest * 1.01  # arrival rounding
    return Bounds(max_batch, fastest, longest, timeout, capacity, sample_bytes)


def relay(settings: Settings) -> Relay | None:
    """Data injection's relay (injection-alpha > 0), else None."""
    if settings.data.injection_alpha <= 0:
        return None
    spec = data_spec(settings)
    held_out = server_test_split(settings).x  # what features of this data set look like
    span = float(held_out.max() - held_out.min())
    return Relay(
        InjectionPlan(
            alpha=settings.data.injection_alpha,
            beta=settings.data.injection_beta,
            seed=settings.run.seed,
            num_features=spec.num_features,
            num_classes=spec.num_classes,
            # the held-out split's range, a tenth of it wider each way (a training sample
            # may lie a little beyond it)
            feature_range=(
                float(held_out.min()) - 0.1 * span,
                float(held_out.max()) + 0.1 * span,
            ),
        )
    )


def build_strategy(
    settings: Settings,
    clock: VirtualClock,
    layout: Layout,
    buffers: Indices | None = None,
    statistics: StatisticsPolicy | None = None,
) -> EdgeStrategy:
    """The strategy and its parts, as the settings choose them. ``buffers``: positions of the
    model's buffers, which compressed collectives send whole every round (with
    ``whole-vectors``, every array of at most one dimension too); ``statistics``: where
    batch-norm statistics come from (default: the clients' averages)."""
    encoding = ENCODINGS[settings.compression.encoding].from_settings(settings.compression)
    buffers = np.zeros(0, dtype=np.int64) if buffers is None else buffers
    whole = whole_entries(layout, buffers, settings.compression.whole_vectors)
    as_is = step_is_aggregate(settings)
    collectives = {
        name: collective.from_settings(settings, layout, whole, as_is)
        for name, collective in COLLECTIVES.items()
    }
    times = RoundTimes(
        settings.run.num_clients,
        layout.size,
        settings.timing.topology,
        {name: collectives[name] for name in run_collectives(settings)},
        encoding.values_nbytes,
    )
    chosen = settings.collective.collective
    chooser = (
        AutoCollective(times, auto_candidates(settings))
        if chosen == AUTO
        else FixedCollective(chosen)
    )
    run = settings.run
    return EdgeStrategy(
        num_clients=run.num_clients,
        layout=layout,
        collectives=collectives,
        selector=SELECTORS[settings.compression.selector],
        encoding=encoding,
        training=LocalTraining(
            learning_rate=settings.training.learning_rate,
            local_steps=settings.training.local_steps,
            batch_size=settings.training.batch_size,
            seed=run.seed,
        ),
        policies=Policies(
            ratio=ratio_policy(settings),
            collective=chooser,
            weights=WEIGHTS[settings.collective.aggregation_weights],
            learning_rates=LearningRates(
                settings.training.lr_scaling, settings.training.lr_scale_max
            ),
            defence=DEFENCES[settings.trust.robust].from_settings(settings, buffers),
            server_optimizer=server_optimizer(settings, buffers),
            statistics=Averaged() if statistics is None else statistics,
        ),
        times=times,
        ledger=Ledger(
            clock, settings.timing.topology, layout.size, settings.timing.timing == "measured"
        ),
        bounds=bounds(settings),
        relay=relay(settings),
        sampler=(ClientSampler(run.clients_per_round, run.seed) if run.clients_per_round else None),
        min_clients=run.min_clients,
        round_timeout_s=run.round_timeout_s,
    )


@dataclass(frozen=True)
class RunParts:
    """What the ServerApp runs with, built from the settings."""

    model: nn.Module
    layout: Layout
    workload: Workload
    test: ArrayData
    validation: ArrayData | None
    strategy: EdgeStrategy

    @property
    def initial(self) -> np.ndarray:
        return model_to_vector(self.model)


def build_run(settings: Settings) -> RunParts:
    """The model, the server's data, the clock and the strategy of a run."""
    catalog = load_catalog(PROJECT_ROOT / settings.timing.devices_file)
    profiles = catalog.assign(settings.timing.device_mix, settings.run.num_clients)
    spec = data_spec(settings)
    test = server_test_split(settings)
    validation = server_validation_split(settings)
    seed = settings.run.seed
    workload = check_workload(settings.training.model, spec, seed=seed)
    model = build_model(settings.training.model, spec, seed=seed)
    layout = Layout.of_model(model)
    schedule = load_schedule(
        PROJECT_ROOT / settings.timing.networks_file,
        settings.timing.network,
        settings.run.num_clients,
        seed,
    )
    timing = settings.timing
    server_link = ServerLink.from_mbps(
        timing.server_uplink_mbps, timing.server_downlink_mbps, timing.server_latency_ms
    )
    clock = VirtualClock(
        profiles, schedule, flops_per_sample=workload.train_flops_per_sample, server=server_link
    )
    statistics = STATISTICS[settings.training.batch_norm_statistics](model, validation)
    strategy = build_strategy(settings, clock, layout, buffer_positions(model), statistics)
    return RunParts(model, layout, workload, test, validation, strategy)
