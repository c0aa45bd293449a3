"""Bounds the server can justify for every number a client reports and the server uses.

From the run's settings (and what the server itself sent), never from the client:
- num-examples: local steps × (the largest batch a policy draws + the samples relayed to it);
- stream-samples: at most num-examples and local steps × the largest batch;
- stream-rate: at most the largest rate the run's rate set gives (``common.rates.rate_span``),
  5 % more for a live stream's measured rate; a device configured above that is refused
  (the server cannot tell it from a lie);
- wait-s: local steps × the largest batch at the slowest rate the set gives (modelled), or the
  round timeout (measured: a reply that waited longer would have missed the round);
- the stream report itself: present exactly when the run streams (a streaming run's rate
  weights and batches read it; a run without streams has nothing to read it for);
- gain-grid: non-decreasing in c, 1 at c = 1 (it is a cumulative share of energy).
A reply outside a bound is refused with what it claimed and the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wire.codec import short
from wire.messages import TrainReply

LIVE_RATE_SLACK = 1.05  # a live stream's measured rate may pass its nominal one by 5 %


@dataclass(frozen=True)
class Bounds:
    max_batch: int  # samples per local step a batch policy can draw
    max_rate: float  # samples/s (inf: streams off)
    max_wait_s: float  # per round

    @property
    def streaming(self) -> bool:
        return math.isfinite(self.max_rate)

    def check(self, reply: TrainReply, local_steps: int, relayed: int) -> None:
        """ValueError naming the first claim outside its bound."""
        most = local_steps * (self.max_batch + relayed)
        if reply.num_examples > most:
            raise ValueError(
                f"num-examples {reply.num_examples} exceeds {most} "
                f"({local_steps} steps x ({self.max_batch} batch + {relayed} relayed))"
            )
        stream = reply.stream
        if self.streaming and stream is None:
            raise ValueError("no stream report (stream-rate, wait-s, ...): this run streams")
        if not self.streaming and stream is not None:
            raise ValueError("a stream report, but this run's streams are off")
        if stream is not None:
            own = min(reply.num_examples, local_steps * self.max_batch)
            if stream.samples > own:
                raise ValueError(f"stream-samples {stream.samples} exceeds {own}")
            # A live stream's rate is measured from publish stamps: jitter may pass the mark.
            max_rate = self.max_rate * (1.0 if stream.live is None else LIVE_RATE_SLACK)
            if stream.rate > max_rate:
                raise ValueError(
                    f"stream-rate {stream.rate:g} exceeds the run's largest, {max_rate:g}"
                )
            if stream.wait_s > self.max_wait_s:
                raise ValueError(
                    f"wait-s {stream.wait_s:g} exceeds the longest possible, {self.max_wait_s:g}"
                )
        gains = reply.gains
        if gains is not None:
            if any(b < a for a, b in zip(gains, gains[1:], strict=False)):
                raise ValueError(f"gain-grid {short(gains)} is not non-decreasing in c")
            if gains and gains[-1] < 1.0 - 1e-6:
                raise ValueError(f"gain-grid ends at {gains[-1]:g}, not 1 (c = 1 keeps all)")
