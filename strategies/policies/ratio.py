"""Compression-ratio policies: each round's c, chosen from what earlier rounds observed.

- ``fixed``: ``compression-ratio`` every round.
- ``nsga2``: NSGA-II over parallel efficiency and compression gain (``nsga2.Nsga2Schedule``);
  clients report their gain curve; the chosen point also names a collective (``auto``).
- adaptive (``adaptive-delta`` > 0, ScaDLES): c when most clients' residual share was at most
  δ last round, else dense (c = 1); the first round is dense.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar, Protocol

import numpy as np

from collectives.base import Aggregate, Participant
from common.settings import Settings
from compress.topk import TopK
from state.fields import Fields, Stateless
from strategies.policies.collective import compressed, modelled_collectives
from strategies.policies.round_times import RoundTimes
from wire.keys import GAIN_GRID, RESIDUAL_SHARE
from wire.train_instruction import CompressionConfig
from wire.train_reply import TrainReply


class RatioPolicy(Protocol):
    @property
    def preferred_collective(self) -> str | None:
        """A collective the policy's choice assumed, if any (``collective = auto`` follows)."""
        ...

    def choose(self, server_round: int, times: RoundTimes) -> float: ...

    def config(self, ratio: float, collective: str) -> CompressionConfig:
        """The instructions' compression config: the ratio and what clients must report."""
        ...

    def check(self, reply: TrainReply) -> None:
        """Raise ValueError when a reply lacks what this policy asked clients to report."""
        ...

    def observe(self, trained: list[Participant], aggregate: Aggregate) -> None: ...

    def record(self) -> dict[str, Any]:
        """Fields of the round's record, of those its class names in ``record_fields``."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: object) -> None: ...


class FixedRatio(Stateless):
    preferred_collective: str | None = None
    record_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    @classmethod
    def from_settings(cls, settings: Settings, collectives: tuple[str, ...]) -> FixedRatio:
        return cls(settings.compression.compression_ratio)

    def choose(self, server_round: int, times: RoundTimes) -> float:
        return self.ratio

    def config(self, ratio: float, collective: str) -> CompressionConfig:
        return CompressionConfig(ratio, collective)

    def check(self, reply: TrainReply) -> None:
        pass

    def observe(self, trained: list[Participant], aggregate: Aggregate) -> None:
        pass

    def record(self) -> dict[str, Any]:
        return {}


class Nsga2Ratio:
    """The NSGA-II schedule; pymoo is imported only when this policy is built."""

    record_fields: ClassVar[tuple[str, ...]] = ("ratio_solve",)  # the solve of this round

    def __init__(self, **schedule: Any) -> None:
        from strategies.policies.nsga2 import Nsga2Schedule

        self.schedule = Nsga2Schedule(**schedule)

    @classmethod
    def from_settings(cls, settings: Settings, collectives: tuple[str, ...]) -> Nsga2Ratio:
        """``collectives``: the run's that the schedule models the gain of (its fronts)."""
        return cls(
            initial_ratio=settings.compression.compression_ratio,
            cr_min=settings.ratio.cr_min,
            cr_max=settings.ratio.cr_max,
            warmup_rounds=settings.ratio.cr_warmup_rounds,
            population=settings.ratio.cr_population,
            generations=settings.ratio.cr_generations,
            seed=settings.run.seed,
            selection=settings.ratio.cr_selection,
            weight_time=settings.ratio.cr_weight_time,
            progress_exponent=settings.ratio.cr_progress_exponent,
            ratio_ramp=settings.ratio.cr_ratio_ramp,
            collectives=collectives,
        )

    @property
    def preferred_collective(self) -> str | None:
        return self.schedule.collective

    def state_dict(self) -> dict[str, object]:
        return self.schedule.state_dict()

    def load_state_dict(self, state: object) -> None:
        self.schedule.load_state_dict(state)

    def choose(self, server_round: int, times: RoundTimes) -> float:
        return self.schedule.ratio_for(
            server_round, times.predict, times.slowest_compute_s(), times.links()
        )

    def config(self, ratio: float, collective: str) -> CompressionConfig:
        return CompressionConfig(ratio, collective, reports={GAIN_GRID: True})

    def check(self, reply: TrainReply) -> None:
        count = len(self.schedule.gain_model.grid)
        gains = reply.reports.get(GAIN_GRID)
        if not isinstance(gains, list) or len(gains) != count:
            raise ValueError(f"gain-grid must be {count} numbers in (0, 1], got {gains!r}")

    def observe(self, trained: list[Participant], aggregate: Aggregate) -> None:
        reporting = [p for p in trained if isinstance(p.reply.reports.get(GAIN_GRID), list)]
        self.schedule.observe_gains(
            [p.reply.reports[GAIN_GRID] for p in reporting],  # type: ignore[misc]
            [p.num_examples for p in reporting],
        )
        if aggregate.gain_factor is not None:
            self.schedule.observe_shared_gain(aggregate.gain_factor)

    def record(self) -> dict[str, Any]:
        solve = self.schedule.last_solve
        return {"ratio_solve": asdict(solve)} if solve is not None else {}


class AdaptiveRatio:
    """ScaDLES adaptive compression: c or dense, by majority vote on residual shares."""

    preferred_collective: str | None = None
    record_fields: ClassVar[tuple[str, ...]] = ("adaptive",)  # the vote on the next round

    def __init__(self, ratio: float, delta: float) -> None:
        self.ratio, self.delta = ratio, delta
        self.compress_next = False  # the first round is dense: nothing reported yet
        self.vote: dict[str, Any] | None = None

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {"schema": self.STATE_SCHEMA, "compress_next": self.compress_next}

    def load_state_dict(self, state: object) -> None:
        fields = Fields("adaptive", state, self.STATE_SCHEMA)
        self.compress_next = fields.flag("compress_next")
        fields.done()

    @classmethod
    def from_settings(cls, settings: Settings, collectives: tuple[str, ...]) -> AdaptiveRatio:
        return cls(settings.compression.compression_ratio, settings.ratio.adaptive_delta)

    def choose(self, server_round: int, times: RoundTimes) -> float:
        return self.ratio if self.compress_next else 1.0

    def config(self, ratio: float, collective: str) -> CompressionConfig:
        return CompressionConfig(ratio, collective, reports={RESIDUAL_SHARE: self.ratio})

    def check(self, reply: TrainReply) -> None:
        if not isinstance(reply.reports.get(RESIDUAL_SHARE), float):
            raise ValueError("residual-share None is not a number in [0, 1]")

    def observe(self, trained: list[Participant], aggregate: Aggregate) -> None:
        """Compress next round when most clients' residual share is at most δ."""
        shares = [
            share
            for p in trained
            if isinstance(share := p.reply.reports.get(RESIDUAL_SHARE), float)
        ]
        votes = sum(share <= self.delta for share in shares)
        self.compress_next = 2 * votes > len(shares)
        self.vote = {
            "votes_to_compress": votes,
            "voters": len(shares),
            "median_share": float(np.median(shares)) if shares else None,
            "compress_next_round": self.compress_next,
        }

    def record(self) -> dict[str, Any]:
        return {"adaptive": self.vote}


class SparsityWarmUp:
    """Deep Gradient Compression's warm-up (Lin et al., ICLR 2018): the first ``rounds`` rounds
    send more than the policy chose, ratio c^(t/(rounds+1)) in round t, so error feedback
    starts from residuals that grow gradually; then the policy's c itself."""

    def __init__(self, inner: RatioPolicy, rounds: int) -> None:
        self.inner, self.rounds = inner, rounds

    @property
    def preferred_collective(self) -> str | None:
        return self.inner.preferred_collective

    def choose(self, server_round: int, times: RoundTimes) -> float:
        ratio = self.inner.choose(server_round, times)
        if server_round > self.rounds:
            return ratio
        return float(ratio ** (server_round / (self.rounds + 1)))

    def config(self, ratio: float, collective: str) -> CompressionConfig:
        return self.inner.config(ratio, collective)

    def check(self, reply: TrainReply) -> None:
        self.inner.check(reply)

    def observe(self, trained: list[Participant], aggregate: Aggregate) -> None:
        self.inner.observe(trained, aggregate)

    def record(self) -> dict[str, Any]:
        return self.inner.record()

    def state_dict(self) -> dict[str, object]:
        return self.inner.state_dict()

    def load_state_dict(self, state: object) -> None:
        self.inner.load_state_dict(state)


class RatioPolicyClass(Protocol):
    record_fields: tuple[str, ...]  # what its ``record()`` may add to a round's record

    def from_settings(self, settings: Settings, collectives: tuple[str, ...]) -> RatioPolicy:
        """``collectives``: the run's that the schedules model the gain of
        (collectives: ``gain``)."""
        ...


# cr-schedule -> the ratio policy of a compressed collective
FIXED, NSGA2 = "fixed", "nsga2"
CR_SCHEDULES: dict[str, RatioPolicyClass] = {FIXED: FixedRatio, NSGA2: Nsga2Ratio}


def ratio_policy(settings: Settings) -> RatioPolicy:
    """Dense rounds send everything; adaptive-delta > 0 (ScaDLES) replaces the cr-schedule;
    sparsity-warmup-rounds wraps either."""
    if not compressed(settings):
        return FixedRatio(1.0)
    modelled = modelled_collectives(settings)
    policy: RatioPolicy
    if settings.ratio.adaptive_delta > 0:
        policy = AdaptiveRatio.from_settings(settings, modelled)
    else:
        policy = CR_SCHEDULES[settings.ratio.cr_schedule].from_settings(settings, modelled)
    if settings.ratio.sparsity_warmup_rounds:
        policy = SparsityWarmUp(policy, settings.ratio.sparsity_warmup_rounds)
    return policy


# every field a ratio policy may add to a round's record: the records carry each (null where
# the run's policy has none), as they always have
_POLICY_CLASSES: tuple[RatioPolicyClass, ...] = (*CR_SCHEDULES.values(), AdaptiveRatio)
RATIO_RECORD_FIELDS = tuple(name for policy in _POLICY_CLASSES for name in policy.record_fields)


def check(settings: Settings) -> list[str]:
    """What the ratio policies need of the rest of the run."""
    errors = []
    schedule, collective = settings.ratio.cr_schedule, settings.collective.collective
    if settings.ratio.adaptive_delta > 0 and (not compressed(settings) or schedule != FIXED):
        errors.append(
            f"adaptive-delta needs a compressed collective with cr-schedule = {FIXED!r} (got "
            f"collective = {collective!r}, cr-schedule = {schedule!r})"
        )
    if compressed(settings) and schedule == NSGA2:
        if not modelled_collectives(settings):
            errors.append(
                f"cr-schedule = {NSGA2!r} weighs a collective's gain, which collective = "
                f"{collective!r} has no model of"
            )
        selector = settings.compression.selector
        if selector != TopK.name:
            errors.append(
                f"cr-schedule = {NSGA2!r} models the gain of the clients' Top-k (their reported "
                f"curves); selector = {selector!r} sends other coordinates"
            )
    return errors
