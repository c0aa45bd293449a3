"""How settings choose the strategy's parts: one table per choice, read by the ServerApp.

A module that does maths does not read the run config; this one turns settings into the
arguments of those modules.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from flwr.app import ConfigRecord

from common.data import data_spec, server_test_split
from common.rates import STREAM_OFF, rate_span
from common.settings import ConfigError, Settings
from strategies.bounds import Bounds
from strategies.collectives import COLLECTIVES
from strategies.collectives.base import Defence, Indices
from strategies.policies.ratio import RatioPolicy
from strategies.policies.ratio import ratio_policy as build_ratio_policy
from strategies.policies.robust import Clip, ClipScreen, Median, NoDefence, TrimmedMean
from strategies.policies.server_optimizer import (
    SERVER_OPTIMIZERS,
    ServerOptimizer,
    ServerStepSettings,
)
from strategies.relay import InjectionPlan, Relay
from wire.keys import BATCH_SIZE, LEARNING_RATE, LOCAL_STEPS, SEED

AUTO = "auto"  # collective = auto: chosen per round
# collective: a compressed collective, or auto
COLLECTIVE_CHOICES = (*(n for n, c in COLLECTIVES.items() if c.compressed), AUTO)

# strategy -> the collective it runs (topk: the compressed one the settings name, or auto)
COLLECTIVE_OF_STRATEGY: dict[str, Callable[[Settings], str]] = {
    "dense": lambda s: "dense",
    "topk": lambda s: s.collective,
}


def auto_candidates(settings: Settings) -> tuple[str, ...]:
    """``auto-collectives``, checked: compressed collectives, each named once."""
    names = tuple(name.strip() for name in settings.auto_collectives.split(","))
    allowed = [name for name, half in COLLECTIVES.items() if half.compressed]
    wrong = [name for name in names if name not in allowed]
    if wrong or len(set(names)) != len(names):
        raise ConfigError(
            f"auto-collectives = {settings.auto_collectives!r}: name each of "
            f"{', '.join(allowed)} at most once, comma-separated"
        )
    return names


def predicted_collectives(settings: Settings) -> tuple[str, ...]:
    """The collectives whose round times are predicted (auto's, or the one the run uses), in
    the collectives table's order."""
    collective = COLLECTIVE_OF_STRATEGY[settings.strategy](settings)
    chosen = set(auto_candidates(settings)) if collective == AUTO else {collective}
    return tuple(name for name in COLLECTIVES if name in chosen)


def ratio_policy(settings: Settings) -> RatioPolicy:
    """The run's ratio policy (strategies/policies/ratio.py), given the collectives whose gain
    the schedules model."""
    modelled = tuple(n for n in predicted_collectives(settings) if COLLECTIVES[n].gain)
    return build_ratio_policy(settings, modelled)


def server_optimizer(settings: Settings, buffers: Indices) -> ServerOptimizer:
    """The server-optimizer table's entry, with the step settings it reads; ``buffers`` (the
    model's, by position) take the aggregate as it is."""
    step = ServerStepSettings(
        learning_rate=settings.server_learning_rate,
        momentum=settings.server_momentum,
        beta1=settings.server_beta1,
        beta2=settings.server_beta2,
        tau=settings.server_tau,
    )
    return SERVER_OPTIMIZERS[settings.server_optimizer](step, buffers)


# robust -> the defence (strategies/policies/robust.py), from the settings and the positions of
# the model's buffers (left out of its comparisons)
ROBUST: dict[str, Callable[[Settings, Indices], Defence]] = {
    NoDefence.name: lambda s, buffers: NoDefence(),
    Clip.name: lambda s, buffers: Clip(s.robust_clip),
    ClipScreen.name: lambda s, buffers: ClipScreen(s.robust_clip, buffers),
    TrimmedMean.name: lambda s, buffers: TrimmedMean(s.robust_trim),
    Median.name: lambda s, buffers: Median(),
}


def bounds(settings: Settings) -> Bounds:
    """What the server can justify of clients' reports in this run (strategies/bounds.py)."""
    max_batch = settings.batch_max if settings.batch_policy == "rate" else settings.batch_size
    timeout = settings.round_timeout_s
    sample_bytes = 4 * data_spec(settings).num_features + 8  # common.data.ArrayData
    if settings.stream_rates == STREAM_OFF:
        return Bounds(max_batch, math.inf, 0.0, timeout, settings.buffer_capacity, sample_bytes)
    slowest, fastest = rate_span(settings.stream_rates, settings.num_clients)
    if settings.timing == "measured":
        longest = timeout  # a reply that waited longer missed the round
    else:
        longest = settings.local_steps * max_batch / slowest * 1.01  # arrival rounding
    return Bounds(max_batch, fastest, longest, timeout, settings.buffer_capacity, sample_bytes)


def relay(settings: Settings) -> Relay | None:
    """Data injection's relay (injection-alpha > 0), else None."""
    if settings.injection_alpha <= 0:
        return None
    spec = data_spec(settings)
    held_out = server_test_split(settings).x  # what features of this data set look like
    span = float(held_out.max() - held_out.min())
    return Relay(
        InjectionPlan(
            alpha=settings.injection_alpha,
            beta=settings.injection_beta,
            seed=settings.seed,
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


def train_config_record(
    *, learning_rate: float, local_steps: int, batch_size: int, seed: int
) -> ConfigRecord:
    """The per-round instructions every client starts from (``Strategy.start``'s config)."""
    return ConfigRecord(
        {LEARNING_RATE: learning_rate, LOCAL_STEPS: local_steps, BATCH_SIZE: batch_size, SEED: seed}
    )
