"""Which collective a round uses (``collective``): the one configured, or ``auto``.

``auto``: the first rounds try each of its collectives once, in the order ``auto-collectives``
names them (so that what only a round of its own measures, such as Allgather's overlap of index
sets, has been measured); then the ratio policy's collective when it names one (NSGA-II weighs
gain as well as time), otherwise the one of least predicted round time (ties go to the first in
the collectives table), and the previous choice while nothing can be predicted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from collectives import COLLECTIVES
from common.settings import Settings
from state.archive import StateError
from state.fields import Fields, Stateless
from strategies.policies.round_times import RoundTimes

AUTO = "auto"


class CollectiveChoices:
    """What ``collective`` takes: a collective of the table as it is now (one registered later
    too), or auto, which chooses per round among the compressed ones."""

    def __iter__(self) -> Iterator[str]:
        return iter((*COLLECTIVES, AUTO))


COLLECTIVE_CHOICES = CollectiveChoices()


def auto_candidates(settings: Settings) -> tuple[str, ...]:
    """``auto-collectives`` as names (unchecked: ``check`` says what is wrong with them)."""
    return tuple(name.strip() for name in settings.collective.auto_collectives.split(","))


def run_collectives(settings: Settings) -> tuple[str, ...]:
    """The collectives a run may use (auto's candidates, or the one configured), in the
    collectives table's order."""
    chosen = settings.collective.collective
    names = set(auto_candidates(settings)) if chosen == AUTO else {chosen}
    return tuple(name for name in COLLECTIVES if name in names)


def modelled_collectives(settings: Settings) -> tuple[str, ...]:
    """The run's collectives whose statistical efficiency the ratio schedules model."""
    return tuple(name for name in run_collectives(settings) if COLLECTIVES[name].gain)


def compressed(settings: Settings) -> bool:
    """Whether the run's rounds compress (auto chooses among compressed collectives only)."""
    chosen = settings.collective.collective
    return chosen == AUTO or COLLECTIVES[chosen].compressed


def check(settings: Settings) -> list[str]:
    """auto's candidates, then each collective the run may use by its own rules."""
    if settings.collective.collective == AUTO:
        names = auto_candidates(settings)
        allowed = [name for name, collective in COLLECTIVES.items() if collective.compressed]
        if set(names) - set(allowed) or len(set(names)) != len(names):
            return [
                f"auto-collectives = {settings.collective.auto_collectives!r}: name each of "
                f"{', '.join(allowed)} at most once, comma-separated"
            ]
    return [
        error for name in run_collectives(settings) for error in COLLECTIVES[name].check(settings)
    ]


class FixedCollective(Stateless):
    def __init__(self, name: str) -> None:
        self.name = name
        self.predicted: dict[str, float] | None = None

    def choose(self, server_round: int, ratio: float, preferred: str | None) -> str:
        return self.name


class AutoCollective:
    def __init__(self, times: RoundTimes, candidates: Sequence[str]) -> None:
        if not candidates or set(candidates) - set(times.collectives):
            raise ValueError(f"auto's collectives {list(candidates)} are not all predicted")
        self.times = times
        self.candidates = tuple(candidates)
        self.current = self.candidates[0]
        self.predicted: dict[str, float] | None = None  # this round's, by collective

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {"schema": self.STATE_SCHEMA, "current": self.current}

    def load_state_dict(self, state: object) -> None:
        fields = Fields("auto", state, self.STATE_SCHEMA)
        current = fields.text("current")
        fields.done()
        if current not in self.candidates:
            raise StateError(f"auto: current {current!r} is none of {', '.join(self.candidates)}")
        self.current = current

    def choose(self, server_round: int, ratio: float, preferred: str | None) -> str:
        self.predicted = None
        if server_round <= len(self.candidates):
            self.current = self.candidates[server_round - 1]
            return self.current
        predicted = self.times.predict(ratio)
        if predicted is not None:
            self.predicted = predicted
        if preferred is not None:
            self.current = preferred
        elif predicted is not None:
            self.current = min(predicted, key=predicted.__getitem__)
        return self.current
