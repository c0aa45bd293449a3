"""One round of a streaming client: read its stream, fill its buffer, draw the round's batches.

The replayed stream and its buffer live in the node's ``context.state`` between rounds; a live
stream (the agent's MQTT subscription) keeps its own buffer in the agent's memory. Every local
step draws its batch with the batch policy at the round's start plus the waits so far (a step's
compute is not waited on: what arrives meanwhile counts for the next round). With a
``WallClock`` (on a device) each step starts at the current wall-clock stream time instead, and
waits are slept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import RecordDict
from numpy.typing import NDArray

from client.buffer import StreamBuffer, next_step
from client.streams import ReplayStream, StreamSource, WallClock
from common.data import data_spec
from common.rates import client_rate
from common.settings import Settings

if TYPE_CHECKING:  # paho-mqtt is imported by the agent only
    from client.live_stream import LiveStream


@dataclass(frozen=True)
class StreamRound:
    batches: list[NDArray[np.int64]]
    rate: float  # samples/s this round
    wait_s: float  # total virtual wait before (and between) the steps
    peak_samples: int  # largest buffer occupancy when a batch was drawn


def draw_stream_round(
    state: RecordDict,
    settings: Settings,
    *,
    partition_id: int,
    partition_size: int,
    start_s: float,
    server_round: int,
    local_steps: int,
    batch_size: int,
    rate: float | None = None,
    wall: WallClock | None = None,
    live: LiveStream | None = None,
) -> StreamRound:
    """``rate``: the node's own rate (its node config), else the run's drawn one;
    ``wall``: real time (a device) instead of the virtual ``start_s``; ``live``: the agent's
    live stream instead of a replay (its own clock, buffer and waits)."""
    if live is not None:
        return _draw_live(live, settings, local_steps, batch_size)
    if rate is None:
        rate = client_rate(
            settings.streams.stream_rates,
            partition_id,
            settings.run.num_clients,
            settings.run.seed,
            server_round if settings.streams.stream_rates_vary else 0,
        )
    source = ReplayStream.from_state(
        state, partition_size, rate, seed=(settings.run.seed, partition_id)
    )
    buffer = StreamBuffer.from_state(
        state, settings.streams.buffer_policy, settings.streams.buffer_capacity
    )
    batches, wait_s, peak = [], 0.0, 0
    for _ in range(local_steps):
        # A round the server accepted nobody in never reached its clock, so this round may
        # start before the stream's last read: a device's time does not go back.
        now_s = start_s + wait_s if wall is None else wall.now_s()
        at_s = max(source.clock_s, now_s)
        step = next_step(
            source,
            buffer,
            at_s,
            settings.streams.batch_policy,
            batch_size=batch_size,
            batch_min=settings.streams.batch_min,
            batch_max=settings.streams.batch_max,
        )
        batches.append(step.batch)
        wait_s += step.wait_s
        if wall is not None:
            wall.wait(step.wait_s)  # the samples drawn above arrive during this sleep
        peak = max(peak, step.occupancy)
    source.to_state(state)
    buffer.to_state(state)
    return StreamRound(batches=batches, rate=rate, wait_s=wait_s, peak_samples=peak)


def _draw_live(
    live: LiveStream, settings: Settings, local_steps: int, batch_size: int
) -> StreamRound:
    """The round's batches from a live stream: each step at the agent's current time."""
    spec = data_spec(settings)
    live.configure(
        spec.num_features,
        spec.num_classes,
        settings.streams.buffer_policy,
        settings.streams.buffer_capacity,
    )
    buffer = live.buffer
    assert buffer is not None
    source: StreamSource = live
    batches, wait_s, peak = [], 0.0, 0
    for _ in range(local_steps):
        step = next_step(
            source,
            buffer,
            live.now_s(),
            settings.streams.batch_policy,
            batch_size=batch_size,
            batch_min=settings.streams.batch_min,
            batch_max=settings.streams.batch_max,
        )
        batches.append(step.batch)
        wait_s += step.wait_s  # waited inside the stream, in real time
        peak = max(peak, step.occupancy)
    return StreamRound(batches=batches, rate=live.rate, wait_s=wait_s, peak_samples=peak)
