"""One round of local training: this round's batches (partition or stream buffer, plus any
injected samples), local SGD from the given model, and the samples to share if asked."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from flwr.app import ArrayRecord, Context
from torch import nn

from client.node import local_data, node_identity, node_stream_rate
from client.stream_round import draw_stream_round
from client.streams import WallClock
from client.training import TrainResult, batch_rng, local_sgd, random_batches
from common.data import ArrayData
from common.rates import STREAM_OFF
from common.settings import Settings
from wire.injection import Samples
from wire.train_instruction import RoundConfig, Vector
from wire.train_reply import StreamReport

if TYPE_CHECKING:  # paho-mqtt is imported by the agent only
    from client.live_stream import LiveStream


@dataclass(frozen=True)
class LocalRound:
    partition_id: int
    result: TrainResult
    stream: StreamReport | None  # streaming clients
    shared: ArrayRecord | None  # data injection: samples this client shares, if asked
    train_s: float  # wall seconds of local SGD


# a client's local round: (context, settings, model, round config, start, relayed samples, live
# stream) -> what it trained; ``train_locally`` is the ClientApp's
Trainer = Callable[
    [Context, Settings, nn.Module, RoundConfig, Vector, "Samples | None", "LiveStream | None"],
    LocalRound,
]


def _share(data: ArrayData, batch: np.ndarray, beta: float, rng: np.random.Generator) -> Samples:
    """A random ceil(β·b) of the b own samples this client trains on this round (all its
    local steps), features and labels."""
    count = min(batch.size, math.ceil(beta * batch.size))
    chosen = np.sort(rng.choice(batch, size=count, replace=False))
    return Samples(data.x[chosen], data.y[chosen])


def train_locally(
    context: Context,
    settings: Settings,
    model: nn.Module,
    config: RoundConfig,
    start: Vector,
    relayed: Samples | None,
    live: LiveStream | None = None,
) -> LocalRound:
    """Local SGD from ``start`` on this round's batches (stream or partition); ``live``: the
    agent's live stream, whose samples replace the partition's."""
    torch.set_num_threads(1)  # several simulated clients share two cores
    partition_id = node_identity(context, settings)
    if settings.streams.stream_rates == STREAM_OFF:
        live = None  # a run without streams trains on the partition, agent or not
    if live is not None and live.partition_id != partition_id:
        raise ValueError(
            f"the agent streams partition {live.partition_id}'s topic, this node is "
            f"partition {partition_id}"
        )
    data = local_data(context, settings, partition_id) if live is None else None
    stream = None
    if settings.streams.stream_rates == STREAM_OFF:
        assert data is not None
        rng = batch_rng(config.seed, partition_id, config.server_round)
        batches = random_batches(rng, len(data), config.batch_size, config.local_steps)
    else:
        drawn = draw_stream_round(
            context.state,
            settings,
            partition_id=partition_id,
            partition_size=0 if data is None else len(data),
            start_s=config.round_start_s,
            server_round=config.server_round,
            local_steps=config.local_steps,
            batch_size=config.batch_size,
            rate=node_stream_rate(context),
            wall=WallClock.from_state(context.state)
            if settings.timing.timing == "measured"
            else None,
            live=live,
        )
        batches = drawn.batches
        counts = None
        if live is not None:  # train on the drawn samples themselves, then let them go
            drawn_ids = np.concatenate(batches)
            data = live.samples(drawn_ids)
            positions = np.arange(drawn_ids.size, dtype=np.int64)
            batches = np.split(positions, np.cumsum([b.size for b in batches])[:-1])
            live.release(int(drawn_ids.size))
            counts = live.counts()
        assert data is not None
        sample_bytes = data.x.itemsize * data.x.shape[1] + data.y.itemsize
        stream = StreamReport(
            rate=drawn.rate,
            wait_s=drawn.wait_s,
            buffer_samples=drawn.peak_samples,
            buffer_bytes=drawn.peak_samples * sample_bytes,
            samples=int(sum(b.size for b in batches)),
            live=counts,
        )
    shared = None
    if config.inject_partitions is not None and partition_id in config.inject_partitions:
        rng = np.random.default_rng([settings.run.seed, 0x1A, partition_id, config.server_round])
        beta = config.inject_beta or 0.0
        shared = _share(data, np.concatenate(batches), beta, rng).to_record()
    extra = None if relayed is None else ArrayData(x=relayed.x, y=relayed.y)
    began = time.perf_counter()
    result = local_sgd(
        model, start, data, batches=batches, learning_rate=config.learning_rate, extra=extra
    )
    return LocalRound(partition_id, result, stream, shared, time.perf_counter() - began)
