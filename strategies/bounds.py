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
- buffer-samples: at most buffer-capacity (or, with no capacity, what 1 TiB of memory holds);
  buffer-bytes: at most that many samples' bytes (float32 features, an int64 label);
- a live stream's running counts: exact in a JSON number (below 2^53);
- train-loss: a cross-entropy (>= 0) of at most MAX_TRAIN_LOSS;
- compress-s: at most the round timeout (a reply that took longer would have missed it);
- gain-grid: non-decreasing in c, 1 at c = 1 (it is a cumulative share of energy).
A reply outside a bound is refused with what it claimed and the bound.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

from wire.codec import short
from wire.keys import GAIN_GRID, LIVE_METRICS
from wire.train_reply import StreamReport, TrainReply

LIVE_RATE_SLACK = 1.05  # a live stream's measured rate may pass its nominal one by 5 %
# A mean cross-entropy this large means the model has diverged: its update is no help.
MAX_TRAIN_LOSS = 1e4
MAX_BUFFER_BYTES = 1 << 40  # no edge device buffers more (a buffer without a capacity)
MAX_COUNT = (1 << 53) - 1  # larger integers are not exact in a JSON record


@dataclass(frozen=True)
class Bounds:
    max_batch: int  # samples per local step a batch policy can draw
    max_rate: float  # samples/s (inf: streams off)
    max_wait_s: float  # per round
    max_compress_s: float  # the round timeout
    buffer_capacity: int  # samples (0: no limit)
    sample_bytes: int  # one buffered sample: float32 features and an int64 label

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
            self._check_buffer(stream)
        if reply.train_loss > MAX_TRAIN_LOSS:
            raise ValueError(f"train-loss {reply.train_loss:g} exceeds {MAX_TRAIN_LOSS:g}")
        if reply.compress_s is not None and reply.compress_s > self.max_compress_s:
            raise ValueError(
                f"compress-s {reply.compress_s:g} exceeds the round timeout, "
                f"{self.max_compress_s:g} s"
            )
        gains = reply.reports.get(GAIN_GRID)
        if isinstance(gains, list):
            if any(b < a for a, b in zip(gains, gains[1:], strict=False)):
                raise ValueError(f"gain-grid {short(gains)} is not non-decreasing in c")
            if gains and gains[-1] < 1.0 - 1e-6:
                raise ValueError(f"gain-grid ends at {gains[-1]:g}, not 1 (c = 1 keeps all)")

    def _check_buffer(self, stream: StreamReport) -> None:
        most = self.buffer_capacity or MAX_BUFFER_BYTES // self.sample_bytes
        if stream.buffer_samples > most:
            raise ValueError(f"buffer-samples {stream.buffer_samples} exceeds {most}")
        most_bytes = stream.buffer_samples * self.sample_bytes
        if stream.buffer_bytes > most_bytes:
            raise ValueError(
                f"buffer-bytes {stream.buffer_bytes} exceeds {stream.buffer_samples} samples "
                f"of {self.sample_bytes} bytes"
            )
        if stream.live is not None:
            for name, count in zip(LIVE_METRICS, astuple(stream.live), strict=True):
                if count > MAX_COUNT:
                    raise ValueError(f"{name} {count} exceeds {MAX_COUNT}")
