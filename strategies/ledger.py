"""The ledger: a round's bytes, phases, seconds and measured times, and its record.

The collective and the strategy log each exchange (``ExchangeLog``); at the round's end the ledger
charges the phases to the virtual clock (Flower's star exchanges, or the ring/tree peer
collective the topology names), and turns them into the round's ``RoundStats``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from collectives.base import Collective, Participant
from collectives.program import ExchangeLog
from timing.clock import PhaseTiming, VirtualClock
from timing.cost import STAR, Link
from timing.measured import measured_times
from timing.timed_grid import TimedGrid
from wire.tally import MeasuredTimes


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
    predicted: dict[str, float] | None = None  # collective = "auto": seconds, by collective
    estimated_links: dict[str, list[float]] | None = None
    learning_rate: float | None = None  # what clients were told this round
    stream: dict[str, Any] | None = None  # streaming clients: buffers, waits, batch sizes
    # the ratio policy's own fields (its ``record()``: NSGA-II's solve, adaptive's vote)
    ratio_policy: dict[str, Any] = field(default_factory=dict)
    injection: dict[str, Any] | None = None  # data injection: samples and bytes both ways
    time_source: str = "modelled"  # of round_time_s, virtual_time_s, comm_time_s and phases
    failed: list[str] = field(default_factory=list)  # nodes sent to that gave no usable reply
    model_payloads: dict[str, int] | None = None  # compressed: nodes sent full, delta, none
    sampling: dict[str, Any] | None = None  # clients-per-round: partitions, identify replies


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


def own_samples(participant: Participant) -> int:
    """Samples of the client's own data trained on: relayed (injected) ones left out."""
    stream = participant.reply.stream
    return participant.num_examples if stream is None else stream.samples


def stream_summary(participants: Sequence[Participant], local_steps: int) -> dict[str, Any] | None:
    """Buffer occupancy (max and total over clients), waits, batch sizes per local step."""
    streaming = [p for p in participants if p.reply.stream is not None]
    if not streaming:
        return None
    reports = [p.reply.stream for p in streaming if p.reply.stream is not None]
    sizes = [own_samples(p) // local_steps for p in streaming]
    return {
        "buffer_samples_max": max(r.buffer_samples for r in reports),
        "buffer_samples_total": sum(r.buffer_samples for r in reports),
        "buffer_bytes_max": max(r.buffer_bytes for r in reports),
        "buffer_bytes_total": sum(r.buffer_bytes for r in reports),
        "wait_s_max": max(r.wait_s for r in reports),
        "wait_s_mean": sum(r.wait_s for r in reports) / len(reports),
        "batch_min": min(sizes),
        "batch_max": max(sizes),
        "global_batch": sum(sizes),
        "rate_total": sum(r.rate for r in reports),
    } | live_summary(streaming)


def live_summary(streaming: Sequence[Participant]) -> dict[str, Any]:
    """Live streams (MQTT): each client's running counts, by partition id; {} for replays."""
    live = {
        str(p.partition_id): dataclasses.asdict(p.reply.stream.live)
        for p in streaming
        if p.reply.stream is not None and p.reply.stream.live is not None
    }
    return {"live": live} if live else {}


@dataclass(frozen=True)
class Charge:
    star: list[PhaseTiming]  # each exchange as Flower ran it (what the link estimator sees)
    charged: list[PhaseTiming]  # what the clock charged (the peer collective on a ring/tree)
    duration_s: float


class Ledger:
    """Owns the clock and the grid's exchange times; one round at a time."""

    def __init__(self, clock: VirtualClock, topology: str, size: int, measured: bool) -> None:
        self.clock = clock
        self.topology = topology
        self.size = size
        self.measured = measured
        self._grid: Grid | None = None

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_grid"] = None  # the run's connection, not its state
        return state

    def begin(self, server_round: int, grid: Grid) -> None:
        """The round's links; the grid's exchange times from here on are this round's."""
        self._grid = grid
        if isinstance(grid, TimedGrid):
            grid.forget()
        self.clock.begin_round(server_round)

    def measure(self, reply: Message) -> MeasuredTimes | None:
        """timing = "measured": the reply's download, busy and upload times (else None)."""
        return measured_times(reply, self._grid) if self.measured else None

    def wall_s(self) -> float | None:
        """timing = "measured": the server's wall time of the exchange that just ended."""
        if not self.measured or not isinstance(self._grid, TimedGrid):
            return None
        return self._grid.exchange_s[-1] if self._grid.exchange_s else None

    def error_destination(self, reply: Message) -> int:
        """The node an error reply stands for (the SuperLink sends them as node 0)."""
        node = reply.metadata.src_node_id
        if isinstance(self._grid, TimedGrid):
            node = self._grid.destination(reply) or node
        return node

    def charge(self, log: ExchangeLog, collective: Collective, ratio: float) -> Charge:
        """Charge the round's phases to the clock (Flower's star exchanges, or the ring/tree
        peer collective the topology names)."""
        star = [self.clock.phase(p.name, p.works, p.wall_s) for p in log.phases]
        charged = self._charged(star, log.phases[0].works, collective, ratio)
        return Charge(star, charged, self.clock.advance(charged))

    def record(
        self,
        server_round: int,
        log: ExchangeLog,
        charge: Charge,
        aggregated: Sequence[Participant],
        *,
        collective: str,
        ratio: float,
        local_steps: int,
        **fields: Any,
    ) -> RoundStats:
        """The round's record: its phases with their bytes and seconds, and ``fields``."""
        rows: list[dict[str, Any]] = [
            {
                "name": phase.name,
                "duration_s": timing.duration_s,
                "bytes_up": sum(w.bytes_up for w in phase.works),
                "bytes_down": phase.bytes_down,
                **measured_parts(timing, self.measured),
            }
            for phase, timing in zip(log.phases, charge.star, strict=True)
        ]
        if self.topology != STAR:
            rows = _peer_rows(charge.charged, rows)
        return RoundStats(
            round=server_round,
            virtual_time_s=self.clock.now_s,
            round_time_s=charge.duration_s,
            bytes_up=sum(r["bytes_up"] for r in rows),
            bytes_down=sum(r["bytes_down"] for r in rows),
            num_clients=len(aggregated),
            train_loss=weighted_loss(aggregated),
            compression_ratio=ratio,
            collective=collective,
            refused=log.refused,
            failed=log.failed,
            time_source="measured" if self.measured else "modelled",
            phases=rows,
            compress_s=max((p.compress_s for p in aggregated), default=0.0),
            comm_time_s=sum(t.comm_s for t in charge.charged),
            stream=stream_summary(aggregated, local_steps),
            **fields,
        )

    def _charged(
        self, star: list[PhaseTiming], train: Sequence[Any], collective: Collective, ratio: float
    ) -> list[PhaseTiming]:
        """What the clock charges: Flower's star exchanges, or the ring/tree peer collective."""
        if self.topology == STAR or not train:
            return star
        latency, bandwidth = self.clock.slowest_link([w.client for w in train])
        seconds = collective.peer_exchange_s(
            self.topology,
            len(train),
            4 * self.size,
            ratio,
            Link.from_bandwidth(latency, bandwidth),
        )
        return self.clock.peer_phases(train, seconds)


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


def weighted_loss(participants: Sequence[Participant]) -> float:
    """Training loss averaged by examples (nan when nobody was aggregated)."""
    if not participants:
        return math.nan
    return float(
        np.average(
            [p.reply.train_loss for p in participants],
            weights=[p.num_examples for p in participants],
        )
    )
