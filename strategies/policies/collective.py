"""Which collective a round uses (``collective``): the one configured, or ``auto``.

``auto``: rounds 1 and 2 try Allreduce and Allgather (so both have been measured); then the
ratio policy's collective when it names one (NSGA-II weighs gain as well as time), otherwise
the cheaper by predicted round time, and the previous choice while nothing can be predicted.
"""

from __future__ import annotations

from strategies.policies.round_times import RoundTimes


class FixedCollective:
    def __init__(self, name: str) -> None:
        self.name = name
        self.predicted: tuple[float | None, float | None] = (None, None)

    def choose(self, server_round: int, ratio: float, preferred: str | None) -> str:
        return self.name


class AutoCollective:
    def __init__(self, times: RoundTimes) -> None:
        self.times = times
        self.current = "allreduce"
        self.predicted: tuple[float | None, float | None] = (None, None)  # this round's

    def choose(self, server_round: int, ratio: float, preferred: str | None) -> str:
        self.predicted = (None, None)
        if server_round <= 2:
            self.current = "allreduce" if server_round == 1 else "allgather"
            return self.current
        predicted = self.times.predict(ratio)
        if predicted is not None:
            self.predicted = predicted
        if preferred is not None:
            self.current = preferred
        elif predicted is not None:
            self.current = "allgather" if predicted[0] <= predicted[1] else "allreduce"
        return self.current
