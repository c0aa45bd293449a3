"""Stream rates S_i (samples/s) per client: the ScaDLES paper's named sets or an explicit list.

| set         | distribution | mean | sd  |
|-------------|--------------|------|-----|
| `S1`        | uniform      | 38   | 24  |
| `S2`        | uniform      | 300  | 112 |
| `S1-normal` | normal       | 64   | 24  |
| `S2-normal` | normal       | 256  | 28  |

A uniform set with mean m and deviation s spans [m − √3·s, m + √3·s]. Draws are clamped to
``RATE_FLOOR``: S1's uniform range reaches below zero, and a device that streams nothing would
stall every synchronous round forever. An explicit list is a comma-separated string
("12, 40, 300"), one rate per client in partition order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RATE_FLOOR = 8.0  # samples/s: the smallest rate-sized batch (batch-min) arrives within 1 s
NORMAL_SPREAD = 6.0  # sd above the mean of a normal set taken as its largest: once in 10**9


@dataclass(frozen=True)
class RateSet:
    distribution: str  # "uniform" or "normal"
    mean: float
    sd: float


RATE_SETS = {
    "S1": RateSet("uniform", 38.0, 24.0),
    "S2": RateSet("uniform", 300.0, 112.0),
    "S1-normal": RateSet("normal", 64.0, 24.0),
    "S2-normal": RateSet("normal", 256.0, 28.0),
}
STREAM_OFF = "off"


def parse_rate_list(text: str) -> list[float]:
    """'12, 40, 300' -> [12.0, 40.0, 300.0]; every rate finite and > 0."""
    rates = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            raise ValueError(f"stream rate {part.strip()!r} is not a number") from None
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"stream rate {part.strip()!r} must be a finite number > 0")
        rates.append(rate)
    return rates


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_stream_rates(value: str, num_clients: int) -> None:
    """Raise ValueError naming what is wrong with a ``stream-rates`` value."""
    if value == STREAM_OFF or value in RATE_SETS:
        return
    if "," not in value and not _is_number(value):
        allowed = ", ".join([STREAM_OFF, *RATE_SETS, "a comma-separated list of rates"])
        raise ValueError(f"stream-rates = {value!r}; allowed values: {allowed}")
    rates = parse_rate_list(value)
    if len(rates) != num_clients:
        raise ValueError(f"stream-rates lists {len(rates)} rates for {num_clients} clients")


def client_rate(
    value: str, partition_id: int, num_clients: int, seed: int, server_round: int = 0
) -> float:
    """Client ``partition_id``'s rate. ``server_round`` > 0 redraws per round (rates that vary);
    0 gives the client's one rate for the whole run. The same arguments give the same rate."""
    if value == STREAM_OFF:
        raise ValueError("streams are off: no stream rate")
    check_stream_rates(value, num_clients)
    if value not in RATE_SETS:
        return parse_rate_list(value)[partition_id]
    spec = RATE_SETS[value]
    rng = np.random.default_rng([seed, 0x5CAD, partition_id, server_round])
    if spec.distribution == "uniform":
        half_width = _half_width(spec)
        draw = rng.uniform(spec.mean - half_width, spec.mean + half_width)
    else:
        draw = rng.normal(spec.mean, spec.sd)
    return max(RATE_FLOOR, float(draw))


def _half_width(spec: RateSet) -> float:
    """A uniform set's half width: mean ± √3·sd has standard deviation sd."""
    return math.sqrt(3.0) * spec.sd


def rate_span(value: str, num_clients: int) -> tuple[float, float]:
    """The slowest and the fastest rate ``client_rate`` can give for ``value`` (streams on)."""
    if value not in RATE_SETS:
        rates = parse_rate_list(value)
        return min(rates), max(rates)
    spec = RATE_SETS[value]
    spread = _half_width(spec) if spec.distribution == "uniform" else NORMAL_SPREAD * spec.sd
    return RATE_FLOOR, max(RATE_FLOOR, spec.mean + spread)
