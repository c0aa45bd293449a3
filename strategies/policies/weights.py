"""Aggregation weights (``aggregation-weights``): one weight per aggregated update.

``examples``: samples trained on (FedAvg's); ``rate``: the client's stream rate (ScaDLES:
r_i = S_i / Σ S_j once normalised); ``uniform``: all equal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from collectives.base import Participant


def _examples(participants: Sequence[Participant]) -> list[float]:
    return [float(p.num_examples) for p in participants]


def _uniform(participants: Sequence[Participant]) -> list[float]:
    return [1.0] * len(participants)


def _rate(participants: Sequence[Participant]) -> list[float]:
    reports = [p.reply.stream for p in participants]
    if any(r is None for r in reports):
        raise ValueError("aggregation-weights = 'rate' needs streaming clients (stream-rates)")
    return [r.rate for r in reports if r is not None]


WEIGHTS: dict[str, Callable[[Sequence[Participant]], list[float]]] = {
    "examples": _examples,
    "rate": _rate,
    "uniform": _uniform,
}
