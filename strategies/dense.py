"""The dense baseline: synchronous rounds, clients return updates, the server averages them.

A FedAvg subclass: ``start`` is Flower's; ``configure_train`` remembers what was sent (and its
bytes) and ``aggregate_train`` checks every reply, averages the updates weighted by examples,
applies them to the global model and advances the virtual clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from numpy.typing import NDArray

from common.params import Layout
from strategies.aggregate import weighted_average
from strategies.cost_models import TOPOLOGIES, Link, peer_exchange_s
from strategies.injection import InjectionPlan, RelayPool, SharedSamples, parse_shared
from strategies.streaming import (
    StreamReport,
    learning_rate,
    own_samples,
    parse_stream_report,
    stream_summary,
    update_weights,
)
from timing.clock import ClientWork, MeasuredTimes, PhaseTiming, VirtualClock
from timing.measured import measured_times
from timing.timed_grid import TimedGrid
from wire.keys import (
    ARRAYS_KEY,
    CONFIG_KEY,
    INJECT_BETA,
    INJECT_KEY,
    INJECT_PARTITIONS,
    METRICS_KEY,
    NUM_EXAMPLES,
    PARTITION_ID,
    ROUND_START_S,
    TRAIN_LOSS,
)
from wire.nbytes import content_nbytes


@dataclass
class RoundStats:
    """What the strategy saw in one round; the ServerApp adds evaluation and writes it out."""

    round: int
    virtual_time_s: float  # cumulative, end of this round
    round_time_s: float
    bytes_up: int
    bytes_down: int
    num_clients: int  # replies aggregated
    train_loss: float
    compression_ratio: float = 1.0
    collective: str = "dense"
    refused: list[str] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    compress_s: float = 0.0  # measured (wall clock): slowest client's compression time
    aggregate_s: float = 0.0  # measured (wall clock): server aggregation time
    comm_time_s: float = 0.0  # virtual: the round's time spent transferring (compute excluded)
    predicted_allgather_s: float | None = None  # collective = "auto": its predictions
    predicted_allreduce_s: float | None = None
    estimated_links: dict[str, list[float]] | None = None
    ratio_solve: dict[str, Any] | None = None  # cr-schedule = nsga2: the solve of this round
    learning_rate: float | None = None  # what clients were told this round
    stream: dict[str, Any] | None = None  # streaming clients: buffers, waits, batch sizes
    adaptive: dict[str, Any] | None = None  # adaptive-delta: the vote on the next round
    injection: dict[str, Any] | None = None  # data injection: samples and bytes both ways
    time_source: str = "modelled"  # of round_time_s, virtual_time_s, comm_time_s and phases
    failed: list[str] = field(default_factory=list)  # nodes sent to that gave no usable reply
    model_payloads: dict[str, int] | None = None  # topk: nodes sent the full model, delta, none


@dataclass(frozen=True)
class ClientReply:
    """A reply that passed validation, in plain types."""

    node_id: int
    partition_id: int
    num_examples: int
    train_loss: float
    update: NDArray[np.float32]
    bytes_up: int
    stream: StreamReport | None = None
    measured: MeasuredTimes | None = None  # timing = "measured"


@dataclass(frozen=True)
class TrainMetrics:
    partition_id: int
    num_examples: int
    train_loss: float
    stream: StreamReport | None = None


def parse_train_metrics(content: RecordDict, num_clients: int) -> TrainMetrics:
    """The metrics every training reply carries; raise ``ValueError`` naming what is wrong."""
    if METRICS_KEY not in content.metric_records:
        raise ValueError(f"missing MetricRecord {METRICS_KEY!r}")
    metrics = content.metric_records[METRICS_KEY]
    for key in (NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS):
        if key not in metrics:
            raise ValueError(f"metric {key!r} missing")
    partition_id, num_examples = metrics[PARTITION_ID], metrics[NUM_EXAMPLES]
    if not isinstance(partition_id, int) or not 0 <= partition_id < num_clients:
        raise ValueError(f"partition-id {partition_id!r} is not an integer in 0..{num_clients - 1}")
    if not isinstance(num_examples, int) or num_examples <= 0:
        raise ValueError(f"num-examples {num_examples!r} is not a positive integer")
    loss = metrics[TRAIN_LOSS]
    if not isinstance(loss, int | float) or not math.isfinite(loss):
        raise ValueError(f"train-loss {loss!r} is not a finite number")
    return TrainMetrics(partition_id, num_examples, float(loss), parse_stream_report(metrics))


def parse_dense_reply(msg: Message, layout: Layout, num_clients: int) -> ClientReply:
    """Check one reply and convert it; raise ``ValueError`` naming what is wrong."""
    if msg.has_error():
        raise ValueError(f"client error: {msg.error.reason}")
    content = msg.content
    if ARRAYS_KEY not in content.array_records:
        raise ValueError(f"missing ArrayRecord {ARRAYS_KEY!r}")
    metrics = parse_train_metrics(content, num_clients)
    record = content.array_records[ARRAYS_KEY]
    for name, array in record.items():
        if array.dtype != "float32":
            raise ValueError(f"array {name!r} has dtype {array.dtype}, expected float32")
    update = layout.flatten(record)
    if not np.all(np.isfinite(update)):
        raise ValueError("update contains NaN or infinite values")
    return ClientReply(
        node_id=msg.metadata.src_node_id,
        partition_id=metrics.partition_id,
        num_examples=metrics.num_examples,
        train_loss=metrics.train_loss,
        update=update,
        bytes_up=content_nbytes(content),
        stream=metrics.stream,
    )


class DenseStrategy(FedAvg):
    """Synchronous distributed SGD: every client, every round, full updates both ways."""

    def __init__(
        self,
        *,
        clock: VirtualClock,
        num_clients: int,
        layout: Layout,
        topology: str = "star",
        aggregation_weights: str = "examples",
        lr_scaling: str = "none",
        lr_scale_max: float = 0.0,
        injection: InjectionPlan | None = None,
        timing: str = "modelled",
        min_clients: int = 0,
    ) -> None:
        if topology not in TOPOLOGIES:
            raise ValueError(f"topology = {topology!r}; allowed values: {', '.join(TOPOLOGIES)}")
        self.topology = topology
        self.measure = timing == "measured"
        self._grid: Grid | None = None
        self.aggregation_weights = aggregation_weights
        self.lr_scaling = lr_scaling
        self.lr_scale_max = lr_scale_max
        self._last_global_batch: int | None = None  # per local step, summed over clients
        self._local_steps = 1
        self._learning_rate: float | None = None
        self.injection = injection
        self._pool = RelayPool()  # samples shared last round, relayed this round
        self._partition_of: dict[int, int] = {}  # node id -> partition id, from replies
        self._injection_stats: dict[str, Any] | None = None
        super().__init__(
            fraction_train=1.0,
            fraction_evaluate=0.0,  # evaluation is centralized at the server
            # a round starts once min_clients are connected and goes to all connected nodes
            min_train_nodes=min_clients or num_clients,
            min_available_nodes=min_clients or num_clients,
            weighted_by_key=NUM_EXAMPLES,
            arrayrecord_key=ARRAYS_KEY,
            configrecord_key=CONFIG_KEY,
        )
        self.clock = clock
        self.num_clients = num_clients
        self.layout = layout
        self.stats: dict[int, RoundStats] = {}
        self._global: NDArray[np.float32] | None = None
        self._bytes_down: dict[int, int] = {}

    def _charged(
        self,
        star: list[PhaseTiming],
        train_works: Sequence[ClientWork],
        collective: str,
        ratio: float,
    ) -> list[PhaseTiming]:
        """What the clock charges: Flower's star exchanges, or the ring/tree peer collective."""
        if self.topology == "star" or not train_works:
            return star
        latency, bandwidth = self.clock.slowest_link([w.client for w in train_works])
        seconds = peer_exchange_s(
            self.topology,
            collective,
            len(train_works),
            4 * self.layout.size,
            ratio,
            Link.from_bandwidth(latency, bandwidth),
        )
        return self.clock.peer_phases(train_works, seconds)

    @staticmethod
    def _peer_rows(
        charged: Sequence[PhaseTiming], star_rows: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Phase records on a ring or tree: compute, then one exchange carrying all the bytes."""
        return [
            {"name": t.name, "duration_s": t.duration_s, "bytes_up": 0, "bytes_down": 0}
            for t in charged[:-1]
        ] + [
            {
                "name": charged[-1].name,
                "duration_s": charged[-1].duration_s,
                "bytes_up": sum(r["bytes_up"] for r in star_rows),
                "bytes_down": sum(r["bytes_down"] for r in star_rows),
            }
        ]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._grid = grid
        if isinstance(grid, TimedGrid):
            grid.forget()  # this round's exchanges are the ones timed from here on
        self.clock.begin_round(server_round)
        config = self._round_config(config, server_round)
        messages = self._with_relayed(
            list(super().configure_train(server_round, arrays, config, grid))
        )
        self._global = self.layout.flatten(arrays)
        sizes: dict[int, int] = {}  # messages share one RecordDict: serialize it once
        self._bytes_down = {}
        for m in messages:
            key = id(m.content)
            if key not in sizes:
                sizes[key] = content_nbytes(m.content)
            self._bytes_down[m.metadata.dst_node_id] = sizes[key]
        return messages

    def _round_config(self, config: ConfigRecord, server_round: int) -> ConfigRecord:
        """The round's instructions: its start in virtual time, its learning rate, and who
        shares samples (data injection)."""
        out = ConfigRecord(dict(config))
        out[ROUND_START_S] = self.clock.now_s
        if self.injection is not None:
            out[INJECT_PARTITIONS] = self.injection.sharers(server_round, self.num_clients)
            out[INJECT_BETA] = self.injection.beta
        self._local_steps = int(config.get("local-steps", 1))  # type: ignore[arg-type]
        if "learning-rate" in config:
            self._learning_rate = learning_rate(
                float(config["learning-rate"]),  # type: ignore[arg-type]
                self.lr_scaling,
                self._last_global_batch,
                int(config.get("batch-size", 1)),  # type: ignore[arg-type]
                self.num_clients,
                self.lr_scale_max,
            )
            out["learning-rate"] = self._learning_rate
        return out

    def _with_relayed(self, messages: list[Message]) -> list[Message]:
        """Data injection: each message gets last round's shared samples from the others."""
        self._injection_stats = None
        if self.injection is None:
            return messages
        out, relayed_samples, relayed_bytes = [], 0, 0
        for m in messages:
            record = self._pool.record_for(self._partition_of.get(m.metadata.dst_node_id))
            if record is None:
                out.append(m)
                continue
            content = RecordDict(dict(m.content))  # messages may share one content
            content[INJECT_KEY] = record
            relayed_samples += int(record["y"].numpy().size)
            relayed_bytes += content_nbytes(RecordDict({INJECT_KEY: record}))
            out.append(
                Message(
                    content=content,
                    message_type=m.metadata.message_type,
                    dst_node_id=m.metadata.dst_node_id,
                )
            )
        self._injection_stats = {
            "relayed_samples": relayed_samples,
            "relayed_bytes_down": relayed_bytes,
            "shared_samples": 0,
            "shared_bytes_up": 0,
        }
        self._pool = RelayPool()
        return out

    def _shared_of(self, content: RecordDict, num_examples: int) -> SharedSamples | None:
        """The samples a reply shares, checked; ValueError names what is wrong."""
        if INJECT_KEY not in content.array_records:
            return None
        if self.injection is None:
            raise ValueError(f"{INJECT_KEY} in a reply, but data injection is off")
        return parse_shared(content, self.injection, num_examples)

    def _collect_shared(
        self, node_id: int, partition_id: int, shared: SharedSamples | None, content: RecordDict
    ) -> None:
        """Keep what an accepted reply shares for next round, and count it."""
        self._partition_of[node_id] = partition_id
        if shared is None:
            return
        self._pool.add(partition_id, *shared)
        if self._injection_stats is not None:
            self._injection_stats["shared_samples"] += int(shared[1].size)
            self._injection_stats["shared_bytes_up"] += content_nbytes(
                RecordDict({INJECT_KEY: content.array_records[INJECT_KEY]})
            )

    def _note_global_batch(self, own_samples: Sequence[int]) -> None:
        """For lr scaling: the global batch per local step of the round just aggregated."""
        if own_samples:
            self._last_global_batch = sum(own_samples) // self._local_steps

    def _weights(
        self, num_examples: Sequence[int], reports: Sequence[StreamReport | None]
    ) -> list[float]:
        return update_weights(self.aggregation_weights, num_examples, reports)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self._global is None:
            raise RuntimeError("aggregate_train called before configure_train")
        replies = list(replies)
        accepted, refused = self._accept(replies)
        new_global = self._global
        if accepted:
            update = weighted_average(
                [r.update for r in accepted],
                self._weights([r.num_examples for r in accepted], [r.stream for r in accepted]),
            )
            new_global = self._global + update
        self._record(server_round, accepted, refused, self._failed(replies, accepted))
        if not accepted:
            return None, None  # keep the old model
        loss = self.stats[server_round].train_loss
        return self.layout.unflatten(new_global), MetricRecord({TRAIN_LOSS: loss})

    def _accept(self, replies: Iterable[Message]) -> tuple[list[ClientReply], list[str]]:
        accepted: list[ClientReply] = []
        refused: list[str] = []
        seen: set[int] = set()
        for msg in replies:
            node = msg.metadata.src_node_id
            try:
                reply = parse_dense_reply(msg, self.layout, self.num_clients)
                if reply.partition_id in seen:
                    raise ValueError(f"partition-id {reply.partition_id} already replied")
                shared = self._shared_of(msg.content, reply.num_examples)
                if self.measure:
                    reply = replace(reply, measured=measured_times(msg, self._grid))
            except ValueError as exc:
                log(WARNING, "Refused reply from node %s: %s", node, exc)
                refused.append(f"node {node}: {exc}")
                continue
            seen.add(reply.partition_id)
            self._collect_shared(node, reply.partition_id, shared, msg.content)
            accepted.append(reply)
        # Replies arrive in completion order; sort so float sums are the same every run.
        accepted.sort(key=lambda r: r.partition_id)
        return accepted, refused

    def _failed(self, replies: Sequence[Message], accepted: Iterable[Any]) -> list[str]:
        """Nodes this round was sent to whose reply never came or was not accepted.

        A node that is gone gets an error reply from the SuperLink (sent as node 0; the
        TimedGrid knows whom it stands for) or none before the round timeout."""
        reasons: dict[int, str] = {}
        for m in replies:
            node = m.metadata.src_node_id
            if m.has_error() and isinstance(self._grid, TimedGrid):
                node = self._grid.destination(m) or node
            reasons[node] = f"error reply ({m.error.reason})" if m.has_error() else "reply refused"
        ok = {r.node_id for r in accepted}
        out = []
        for node in sorted(set(self._bytes_down) - ok):
            partition = self._partition_of.get(node)
            who = f"node {node}" + (f" (partition {partition})" if partition is not None else "")
            out.append(f"{who}: {reasons.get(node, 'no reply before the round timeout')}")
            log(WARNING, "%s; the round goes on without it", out[-1])
        return out

    def _measured_phase_s(self, index: int) -> float | None:
        """timing = "measured": the server's wall time of this round's ``index``-th exchange."""
        if not self.measure or not isinstance(self._grid, TimedGrid):
            return None
        exchanges = self._grid.exchange_s
        return exchanges[index] if index < len(exchanges) else None

    def _record(
        self,
        server_round: int,
        accepted: list[ClientReply],
        refused: list[str],
        failed: list[str],
    ) -> None:
        works = [
            ClientWork(
                client=r.partition_id,
                bytes_down=self._bytes_down.get(r.node_id, 0),
                samples=r.num_examples,
                bytes_up=r.bytes_up,
                wait_s=r.stream.wait_s if r.stream is not None else 0.0,
                measured=r.measured,
            )
            for r in accepted
        ]
        own = [own_samples(r.num_examples, r.stream) for r in accepted]
        self._note_global_batch(own)
        phase = self.clock.phase("train", works, self._measured_phase_s(0))
        charged = self._charged([phase], works, "dense", 1.0)
        duration = self.clock.advance(charged)
        weights = [r.num_examples for r in accepted]
        losses = [r.train_loss for r in accepted]
        loss = float(np.average(losses, weights=weights)) if accepted else math.nan
        bytes_up = sum(w.bytes_up for w in works)
        bytes_down = sum(self._bytes_down.values())
        rows: list[dict[str, Any]] = [
            {
                "name": phase.name,
                "duration_s": phase.duration_s,
                "bytes_up": bytes_up,
                "bytes_down": bytes_down,
                **measured_parts(phase, self.measure),
            }
        ]
        self.stats[server_round] = RoundStats(
            round=server_round,
            virtual_time_s=self.clock.now_s,
            round_time_s=duration,
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            num_clients=len(accepted),
            train_loss=loss,
            comm_time_s=sum(t.comm_s for t in charged),
            refused=refused,
            failed=failed,
            time_source="measured" if self.measure else "modelled",
            phases=rows if self.topology == "star" else self._peer_rows(charged, rows),
            learning_rate=self._learning_rate,
            injection=self._injection_stats,
            stream=stream_summary(
                [r.stream for r in accepted],
                [n // self._local_steps for n in own],
            ),
        )


def measured_parts(phase: PhaseTiming, measured: bool) -> dict[str, float]:
    """timing = "measured": the slowest client's download, busy and upload times in a phase."""
    if not measured or not phase.clients:
        return {}
    clients = phase.clients.values()
    return {
        "download_s_max": max(t.download_s for t in clients),
        "busy_s_max": max(t.compute_s for t in clients),
        "train_s_max": max(t.train_s for t in clients),
        "upload_s_max": max(t.upload_s for t in clients),
    }


def train_config_record(
    *, learning_rate: float, local_steps: int, batch_size: int, seed: int
) -> ConfigRecord:
    """The per-round instructions every client receives (the round number is added by FedAvg)."""
    return ConfigRecord(
        {
            "learning-rate": learning_rate,
            "local-steps": local_steps,
            "batch-size": batch_size,
            "seed": seed,
        }
    )


def reply_content(
    update: ArrayRecord, *, partition_id: int, num_examples: int, train_loss: float
) -> RecordDict:
    """What a client sends back after a dense training round."""
    return RecordDict(
        {
            ARRAYS_KEY: update,
            METRICS_KEY: MetricRecord(
                {
                    PARTITION_ID: partition_id,
                    NUM_EXAMPLES: num_examples,
                    TRAIN_LOSS: train_loss,
                }
            ),
        }
    )
