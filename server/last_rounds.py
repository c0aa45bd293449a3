"""How a run ended, measured so that one lucky or unlucky round does not decide it.

Test accuracy moves from round to round, by a few images on a small test split and by tens of
points where batch-norm statistics swing. So a run is judged over its last ``WINDOW``
evaluated rounds: their mean accuracy (A20), its standard deviation over those rounds (S20)
and the worst of them (M20). A target counts as reached at the first round where the mean
of the last ``SMOOTHING`` rounds reaches it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

WINDOW = 20
SMOOTHING = 5


@dataclass(frozen=True)
class LastRounds:
    """Accuracy over a run's last ``rounds`` (``WINDOW``, or all of a shorter run)."""

    rounds: int
    mean_accuracy: float  # A20
    sd_accuracy: float  # S20: population sd over those rounds (0 for one round)
    worst_accuracy: float  # M20

    @classmethod
    def of(cls, accuracies: Sequence[float], window: int = WINDOW) -> LastRounds:
        last = [float(a) for a in accuracies[-window:]]
        if not last:
            raise ValueError("a run without rounds")
        return cls(len(last), statistics.fmean(last), statistics.pstdev(last), min(last))

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def moving_mean(values: Sequence[float], width: int = SMOOTHING) -> list[float | None]:
    """The mean of each value and the ``width - 1`` before it (None until there are enough)."""
    out: list[float | None] = []
    for i in range(len(values)):
        out.append(None if i + 1 < width else statistics.fmean(values[i + 1 - width : i + 1]))
    return out


def time_to_target(
    rows: Sequence[Mapping[str, Any]],
    target: float,
    width: int = SMOOTHING,
    field: str = "accuracy",
) -> tuple[int, float] | None:
    """(round, virtual seconds) at the first round whose moving mean of ``field`` (test
    accuracy unless told, e.g. ``validation_accuracy``) reaches ``target``; None when none
    does."""
    smoothed = moving_mean([float(r[field]) for r in rows], width)
    for row, mean in zip(rows, smoothed, strict=True):
        if mean is not None and mean >= target:
            return int(row["round"]), float(row["virtual_time_s"])
    return None
