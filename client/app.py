"""The ClientApp: wiring only. Reads its node's identity, loads its data, trains, replies."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client.compression import (
    ErrorFeedback,
    apply_model,
    compress_topk,
    hold_compensated,
    pending_topk,
    send_values_at,
)
from client.stream_round import draw_stream_round
from client.streams import WallClock
from client.training import TrainResult, batch_rng, local_sgd, random_batches
from common.data import ArrayData, client_partition, data_spec
from common.models import build_model
from common.params import Layout
from common.rates import STREAM_OFF
from common.settings import Settings
from compress.gain import DEFAULT_GAIN_GRID, gain_curve
from strategies.dense import reply_content
from strategies.injection import shared_record
from wire.codec import indices_record, topk_count, values_record
from wire.keys import (
    ADAPTIVE_RATIO,
    ARRAYS_KEY,
    BUFFER_BYTES,
    BUFFER_SAMPLES,
    COMPRESS_S,
    CONFIG_KEY,
    GAIN_GRID,
    INDEX_SET_KEY,
    INDICES_ACTION,
    INJECT_BETA,
    INJECT_KEY,
    INJECT_PARTITIONS,
    METRICS_KEY,
    NUM_EXAMPLES,
    PARTITION_ID,
    RECEIVED_AT,
    RESIDUAL_SHARE,
    ROUND_START_S,
    SENT_AT,
    SPARSE_KEY,
    STREAM_RATE,
    STREAM_SAMPLES,
    TOPK_NORM2,
    TRAIN_LOSS,
    TRAIN_S,
    VALUES_ACTION,
    WAIT_S,
)

LOCAL_DATA_KEY = "local-data"
ADAPTIVE_STATE_KEY = "adaptive"
ADAPTIVE_SMOOTHING = 0.3  # EWMA weight of the newest residual share


def smoothed_residual_share(state: RecordDict, share: float) -> float:
    """EWMA of this client's residual share, kept in ``context.state``."""
    if ADAPTIVE_STATE_KEY in state.config_records:
        previous = float(state.config_records[ADAPTIVE_STATE_KEY]["share"])  # type: ignore[arg-type]
        share = ADAPTIVE_SMOOTHING * share + (1 - ADAPTIVE_SMOOTHING) * previous
    state[ADAPTIVE_STATE_KEY] = ConfigRecord({"share": share})
    return min(1.0, max(0.0, share))


app = ClientApp()


def node_identity(context: Context, settings: Settings) -> int:
    """This node's partition id, checked against the run's number of clients."""
    config = context.node_config
    for key in ("partition-id", "num-partitions"):
        if key not in config:
            raise ValueError(f"node config lacks {key!r} (pass it with --node-config)")
    partition_id, num_partitions = int(config["partition-id"]), int(config["num-partitions"])
    if num_partitions != settings.num_clients:
        raise ValueError(
            f"node has num-partitions={num_partitions} but the run has "
            f"num-clients={settings.num_clients}; they must agree"
        )
    return partition_id


def node_stream_rate(context: Context) -> float | None:
    """The device's own stream rate (node config ``stream-rate``, samples/s), if it sets one."""
    if "stream-rate" not in context.node_config:
        return None
    value = context.node_config["stream-rate"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"node config stream-rate = {value!r} is not a number")
    if value <= 0:
        raise ValueError(f"node config stream-rate must be > 0 samples/s, got {value}")
    return float(value)


def stamped(
    reply: Message, settings: Settings, received_at: float, train_s: float | None = None
) -> Message:
    """timing = "measured": when this handler began, how long local SGD took, and when its
    reply left (wall clock)."""
    if settings.timing == "measured":
        metrics = reply.content.metric_records[METRICS_KEY]
        metrics[RECEIVED_AT] = received_at
        if train_s is not None:
            metrics[TRAIN_S] = train_s
        metrics[SENT_AT] = time.time()
    return reply


def local_data(context: Context, settings: Settings, partition_id: int) -> ArrayData:
    """The node's partition, kept in ``context.state`` so it is loaded once per node."""
    if LOCAL_DATA_KEY not in context.state:
        data = client_partition(settings, partition_id)
        context.state[LOCAL_DATA_KEY] = ArrayRecord({"x": Array(data.x), "y": Array(data.y)})
    record = context.state[LOCAL_DATA_KEY]
    assert isinstance(record, ArrayRecord)
    return ArrayData(
        x=np.asarray(record["x"].numpy(), dtype=np.float32),
        y=np.asarray(record["y"].numpy(), dtype=np.int64),
    )


@dataclass(frozen=True)
class RoundWork:
    partition_id: int
    result: TrainResult
    stream: MetricRecord  # stream metrics (empty when streams are off)
    shared: ArrayRecord | None  # data injection: samples this client shares, if asked
    train_s: float  # wall seconds of local SGD


def _relayed(content: RecordDict) -> ArrayData | None:
    """Samples other clients shared (data injection), relayed by the server."""
    if INJECT_KEY not in content.array_records:
        return None
    record = content.array_records[INJECT_KEY]
    return ArrayData(
        x=np.asarray(record["x"].numpy(), dtype=np.float32),
        y=np.asarray(record["y"].numpy(), dtype=np.int64),
    )


def _share(
    data: ArrayData, batch: np.ndarray, beta: float, rng: np.random.Generator
) -> ArrayRecord:
    """A random ceil(β·b) of the b own samples this client trains on this round (all its
    local steps), features and labels."""
    count = min(batch.size, math.ceil(beta * batch.size))
    chosen = np.sort(rng.choice(batch, size=count, replace=False))
    return shared_record(data.x[chosen], data.y[chosen])


def _train(
    context: Context, settings: Settings, content: RecordDict, start: np.ndarray
) -> RoundWork:
    """Local SGD from ``start`` on this round's batches (stream or partition)."""
    config = content.config_records[CONFIG_KEY]
    torch.set_num_threads(1)  # several simulated clients share two cores
    partition_id = node_identity(context, settings)
    data = local_data(context, settings, partition_id)
    model = build_model(settings.model, data_spec(settings), seed=settings.seed)
    steps = int(config["local-steps"])  # type: ignore[arg-type]
    batch_size = int(config["batch-size"])  # type: ignore[arg-type]
    server_round = int(config["server-round"])  # type: ignore[arg-type]
    stream_metrics = MetricRecord()
    if settings.stream_rates == STREAM_OFF:
        rng = batch_rng(int(config["seed"]), partition_id, server_round)  # type: ignore[arg-type]
        batches = random_batches(rng, len(data), batch_size, steps)
    else:
        if ROUND_START_S not in config:
            raise ValueError(f"streaming client needs {ROUND_START_S!r} in the instructions")
        drawn = draw_stream_round(
            context.state,
            settings,
            partition_id=partition_id,
            partition_size=len(data),
            start_s=float(config[ROUND_START_S]),  # type: ignore[arg-type]
            server_round=server_round,
            local_steps=steps,
            batch_size=batch_size,
            rate=node_stream_rate(context),
            wall=WallClock.from_state(context.state) if settings.timing == "measured" else None,
        )
        batches = drawn.batches
        sample_bytes = data.x[0].nbytes + data.y[0].nbytes
        stream_metrics = MetricRecord(
            {
                STREAM_RATE: drawn.rate,
                WAIT_S: drawn.wait_s,
                BUFFER_SAMPLES: drawn.peak_samples,
                BUFFER_BYTES: drawn.peak_samples * sample_bytes,
                STREAM_SAMPLES: int(sum(b.size for b in batches)),
            }
        )
    shared = None
    if partition_id in list(config.get(INJECT_PARTITIONS, [])):  # type: ignore[arg-type]
        rng = np.random.default_rng([settings.seed, 0x1A, partition_id, server_round])
        beta = float(config[INJECT_BETA])  # type: ignore[arg-type]
        shared = _share(data, np.concatenate(batches), beta, rng)  # this round's own samples
    began = time.perf_counter()
    result = local_sgd(
        model,
        start,
        data,
        batches=batches,
        learning_rate=float(config["learning-rate"]),  # type: ignore[arg-type]
        extra=_relayed(content),
    )
    return RoundWork(partition_id, result, stream_metrics, shared, time.perf_counter() - began)


@app.train()
def train(msg: Message, context: Context) -> Message:
    received_at = time.time()
    settings = Settings.from_run_config(context.run_config)
    reply, train_s = _train_reply(msg, context, settings)
    return stamped(reply, settings, received_at, train_s)


def _train_reply(msg: Message, context: Context, settings: Settings) -> tuple[Message, float]:
    """The reply to a training instruction, and how long its local SGD took."""
    config = msg.content.config_records[CONFIG_KEY]
    if settings.strategy == "dense":
        received = msg.content.array_records[ARRAYS_KEY]
        layout = Layout.of_record(received)
        work = _train(context, settings, msg.content, layout.flatten(received))
        content = reply_content(
            layout.unflatten(work.result.update),
            partition_id=work.partition_id,
            num_examples=work.result.num_examples,
            train_loss=work.result.train_loss,
        )
        content.metric_records[METRICS_KEY].update(work.stream)
        if work.shared is not None:
            content[INJECT_KEY] = work.shared
        return Message(content=content, reply_to=msg), work.train_s

    start = apply_model(context.state, msg.content, config)
    work = _train(context, settings, msg.content, start)
    partition_id, result = work.partition_id, work.result
    began = time.perf_counter()
    k = topk_count(start.size, float(config["compression-ratio"]))  # type: ignore[arg-type]
    metrics = MetricRecord(
        {
            PARTITION_ID: partition_id,
            NUM_EXAMPLES: result.num_examples,
            TRAIN_LOSS: result.train_loss,
            **work.stream,
        }
    )
    content = RecordDict({METRICS_KEY: metrics})
    if work.shared is not None:
        content[INJECT_KEY] = work.shared
    if config.get("report-gain", False) or ADAPTIVE_RATIO in config:  # before compression
        compensated = (
            result.update + ErrorFeedback.from_state(context.state, result.update.size).residual
        )
        if config.get("report-gain", False):
            metrics[GAIN_GRID] = gain_curve(compensated, DEFAULT_GAIN_GRID)
        if ADAPTIVE_RATIO in config:
            ratio = float(config[ADAPTIVE_RATIO])  # type: ignore[arg-type]
            metrics[RESIDUAL_SHARE] = smoothed_residual_share(
                context.state, 1.0 - gain_curve(compensated, [ratio])[0]
            )
    if config["collective"] == "allgather":
        sparse, _ = compress_topk(context.state, result.update, k)
        content[SPARSE_KEY] = sparse.to_record()
    elif INDEX_SET_KEY in msg.content.array_records:  # global index policy: one phase
        index_set = msg.content.array_records[INDEX_SET_KEY]
        content[SPARSE_KEY] = values_record(send_values_at(context.state, index_set, result.update))
    else:  # allreduce with a leader: keep e until the index and value phases
        metrics[TOPK_NORM2] = hold_compensated(context.state, result.update, k)
    metrics[COMPRESS_S] = time.perf_counter() - began
    return Message(content=content, reply_to=msg), work.train_s


@app.train(INDICES_ACTION)
def train_indices(msg: Message, context: Context) -> Message:
    """Allreduce index phase: the leader sends the Top-k indices of its compensated update."""
    received_at = time.time()
    began = time.perf_counter()
    config = msg.content.config_records[CONFIG_KEY]
    ratio = float(config["compression-ratio"])  # type: ignore[arg-type]
    indices, size = pending_topk(context.state, ratio)
    content = RecordDict(
        {
            SPARSE_KEY: indices_record(indices, size),
            METRICS_KEY: MetricRecord({COMPRESS_S: time.perf_counter() - began}),
        }
    )
    settings = Settings.from_run_config(context.run_config)
    return stamped(Message(content=content, reply_to=msg), settings, received_at)


@app.train(VALUES_ACTION)
def train_values(msg: Message, context: Context) -> Message:
    """Allreduce value phase: e at the shared indices; the residual keeps the rest."""
    received_at = time.time()
    began = time.perf_counter()
    values = send_values_at(context.state, msg.content.array_records[INDEX_SET_KEY])
    content = RecordDict(
        {
            SPARSE_KEY: values_record(values),
            METRICS_KEY: MetricRecord({COMPRESS_S: time.perf_counter() - began}),
        }
    )
    settings = Settings.from_run_config(context.run_config)
    return stamped(Message(content=content, reply_to=msg), settings, received_at)
