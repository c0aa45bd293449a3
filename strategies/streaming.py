"""Server side of streaming clients: their reports, update weights, learning-rate scaling.

Weights (``aggregation-weights``): ``examples`` (samples trained on, FedAvg's), ``rate``
(ScaDLES: r_i = S_i / Σ S_j) or ``uniform``. ``lr-scaling = linear`` multiplies the learning
rate by (global batch of the last round) / (batch-size × clients), the linear scaling rule on
the batches clients actually used; with rate-sized batches and one step per second this is
the paper's η·ΣS/B.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.settings import AGGREGATION_WEIGHTS, LR_SCALINGS
from wire.keys import (
    BUFFER_BYTES,
    BUFFER_SAMPLES,
    STREAM_METRICS,
    STREAM_RATE,
    STREAM_SAMPLES,
    WAIT_S,
)


@dataclass(frozen=True)
class StreamReport:
    rate: float  # samples/s
    wait_s: float
    buffer_samples: int
    buffer_bytes: int
    samples: int  # own stream samples trained on this round (all local steps)


def parse_stream_report(metrics: Mapping[str, Any]) -> StreamReport | None:
    """The stream metrics of a reply (None when it carries none); ValueError names a bad one."""
    present = [key for key in STREAM_METRICS if key in metrics]
    if not present:
        return None
    if len(present) != len(STREAM_METRICS):
        missing = sorted(set(STREAM_METRICS) - set(present))
        raise ValueError(f"stream metrics incomplete: {', '.join(missing)} missing")
    rate, wait = metrics[STREAM_RATE], metrics[WAIT_S]
    if not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"{STREAM_RATE} {rate!r} is not a finite number > 0")
    if not isinstance(wait, int | float) or not math.isfinite(wait) or wait < 0:
        raise ValueError(f"{WAIT_S} {wait!r} is not a finite number >= 0")
    counts = {key: metrics[key] for key in (BUFFER_SAMPLES, BUFFER_BYTES, STREAM_SAMPLES)}
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} {value!r} is not an integer >= 0")
    return StreamReport(
        float(rate),
        float(wait),
        counts[BUFFER_SAMPLES],
        counts[BUFFER_BYTES],
        counts[STREAM_SAMPLES],
    )


def own_samples(num_examples: int, report: StreamReport | None) -> int:
    """Samples of the client's own data trained on: relayed (injected) ones left out."""
    return num_examples if report is None else report.samples


def update_weights(
    policy: str, num_examples: Sequence[int], reports: Sequence[StreamReport | None]
) -> list[float]:
    """One weight per client update, in the order given."""
    if policy == "examples":
        return [float(n) for n in num_examples]
    if policy == "uniform":
        return [1.0] * len(num_examples)
    if policy == "rate":
        if any(r is None for r in reports):
            raise ValueError("aggregation-weights = 'rate' needs streaming clients (stream-rates)")
        return [r.rate for r in reports if r is not None]
    raise ValueError(f"aggregation-weights = {policy!r}; allowed: {', '.join(AGGREGATION_WEIGHTS)}")


def learning_rate(
    base: float,
    policy: str,
    last_global_batch: int | None,
    batch_size: int,
    num_clients: int,
    scale_max: float = 0.0,
) -> float:
    """This round's learning rate (the base one until a round has reported its batches).

    ``scale_max`` > 0 caps the linear factor: the rule holds for moderately larger batches,
    and rounds that last seconds (a real deployment) make rate batches, and so the factor,
    grow without bound."""
    if policy == "none" or last_global_batch is None:
        return base
    if policy == "linear":
        scale = last_global_batch / (batch_size * num_clients)
        return base * (min(scale, scale_max) if scale_max > 0 else scale)
    raise ValueError(f"lr-scaling = {policy!r}; allowed: {', '.join(LR_SCALINGS)}")


def stream_summary(
    reports: Sequence[StreamReport | None], batches: Sequence[int]
) -> dict[str, Any] | None:
    """Per-round record: buffer occupancy (max and total over clients), waits, batch sizes."""
    streaming = [(r, b) for r, b in zip(reports, batches, strict=True) if r is not None]
    if not streaming:
        return None
    rs = [r for r, _ in streaming]
    sizes = [b for _, b in streaming]
    return {
        "buffer_samples_max": max(r.buffer_samples for r in rs),
        "buffer_samples_total": sum(r.buffer_samples for r in rs),
        "buffer_bytes_max": max(r.buffer_bytes for r in rs),
        "buffer_bytes_total": sum(r.buffer_bytes for r in rs),
        "wait_s_max": max(r.wait_s for r in rs),
        "wait_s_mean": sum(r.wait_s for r in rs) / len(rs),
        "batch_min": min(sizes),
        "batch_max": max(sizes),
        "global_batch": sum(sizes),
        "rate_total": sum(r.rate for r in rs),
    }
