"""Synchronous Top-k training with error feedback; the server plays the collective.

``collective = "allgather"``: every client sends TopK(e) (values and indices); the server sums
them weighted by scatter-add in O(N·k) and applies the union. One phase.

``collective = "allreduce"`` (Allreduce-compatible Top-k): all clients send values at one
shared index set I.
- ``index-policy = "leader"``: phase ``train`` (every client trains and reports ||TopK(e)||²),
  phase ``indices`` (the leader sends its Top-k indices; STAR: the client at position
  round mod N by partition id; VAR: the largest ||TopK(e)||²), phase ``values`` (I goes to
  every client, each sends e[I]).
- ``index-policy = "global"``: I is the Top-k of the previous round's aggregated update and goes
  out with the instructions, so clients send e[I] at once (round 1 uses the leader phases).

Downlink: a client whose replica is at the previous version gets only the last aggregated
sparse update; one at the current version gets no model; any other gets the full model.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import sample_nodes
from numpy.typing import NDArray

from common.params import Layout
from common.settings import COLLECTIVES, INDEX_POLICIES, LEADERS
from compress.topk import topk_indices
from strategies.aggregate import scatter_add, weighted_average
from strategies.cost_models import (
    Link,
    peer_exchange_s,
    star_allgather_topk_s,
    star_allreduce_topk_s,
)
from strategies.dense import DenseStrategy, RoundStats, measured_parts, parse_train_metrics
from strategies.injection import InjectionPlan
from strategies.ratio_scheduler import Nsga2Schedule
from strategies.streaming import StreamReport, own_samples, stream_summary
from timing.clock import ClientWork, MeasuredTimes, PhaseTiming, VirtualClock
from timing.link_estimator import DOWN, UP, LinkEstimator
from timing.measured import measured_times
from timing.timed_grid import TimedGrid
from wire.codec import (
    PayloadError,
    Sparse,
    decode_indices,
    decode_values,
    indices_record,
    topk_count,
    values_record,
)
from wire.keys import (
    ADAPTIVE_RATIO,
    COMPRESS_S,
    CONFIG_KEY,
    DELTA_KEY,
    GAIN_GRID,
    INDEX_SET_KEY,
    INDICES_ACTION,
    METRICS_KEY,
    MODEL_KEY,
    RESIDUAL_SHARE,
    SPARSE_KEY,
    TOPK_NORM2,
    VALUES_ACTION,
)
from wire.nbytes import content_nbytes


@dataclass
class Participant:
    """One client's standing in the current round."""

    node_id: int
    partition_id: int
    num_examples: int
    train_loss: float
    compress_s: float
    bytes_up: int  # of its training reply
    norm2: float = math.nan
    sparse: Sparse | None = None  # allgather: its TopK(e)
    values: NDArray[np.float32] | None = None  # allreduce: e[I]
    gains: list[float] | None = None  # cr-schedule = nsga2: gain at each grid ratio
    stream: StreamReport | None = None  # streaming clients: rate, wait, buffer
    residual_share: float | None = None  # adaptive: smoothed |‖e‖² − ‖TopK(e)‖²| / ‖e‖²
    measured: MeasuredTimes | None = None  # timing = "measured": its train-phase exchange


def _gains(content: RecordDict, count: int) -> list[float]:
    gains = content.metric_records[METRICS_KEY].get(GAIN_GRID)
    if (
        not isinstance(gains, list)
        or len(gains) != count
        or not all(isinstance(g, float) and 0.0 < g <= 1.0 for g in gains)
    ):
        raise ValueError(f"gain-grid must be {count} numbers in (0, 1], got {gains!r}")
    return [float(g) for g in gains]


def _shared_index_factor(participants: Sequence[Participant]) -> float:
    """Mean over clients (by examples) of ||e[I]||² / ||TopK(e)||²: how much of its own
    Top-k energy a client sent at the leader's indices (1 for the leader)."""
    shares = [
        min(1.0, float(p.values.astype(np.float64) @ p.values) / p.norm2) if p.norm2 > 0 else 1.0
        for p in participants
        if p.values is not None
    ]
    weights = [p.num_examples for p in participants if p.values is not None]
    return float(np.average(shares, weights=weights))


def _residual_share(content: RecordDict) -> float:
    value = content.metric_records[METRICS_KEY].get(RESIDUAL_SHARE)
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{RESIDUAL_SHARE} {value!r} is not a number in [0, 1]")
    return float(value)


def _compress_s(content: RecordDict) -> float:
    value = content.metric_records[METRICS_KEY].get(COMPRESS_S, 0.0)
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"compress-s {value!r} is not a non-negative number")
    return float(value)


class TopKStrategy(DenseStrategy):
    """Top-k with error feedback, aggregated Allgather-style or as Allreduce-compatible Top-k."""

    def __init__(
        self,
        *,
        clock: VirtualClock,
        num_clients: int,
        layout: Layout,
        compression_ratio: float,
        collective: str,
        leader: str = "star",
        index_policy: str = "leader",
        round_timeout_s: float = 600.0,
        topology: str = "star",
        aggregation_weights: str = "examples",
        lr_scaling: str = "none",
        lr_scale_max: float = 0.0,
        injection: InjectionPlan | None = None,
        schedule: Nsga2Schedule | None = None,
        adaptive_delta: float = 0.0,
        timing: str = "modelled",
        min_clients: int = 0,
    ) -> None:
        for name, value, allowed in (
            ("collective", collective, COLLECTIVES),
            ("leader", leader, LEADERS),
            ("index-policy", index_policy, INDEX_POLICIES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} = {value!r}; allowed values: {', '.join(allowed)}")
        super().__init__(
            clock=clock,
            num_clients=num_clients,
            layout=layout,
            topology=topology,
            aggregation_weights=aggregation_weights,
            lr_scaling=lr_scaling,
            lr_scale_max=lr_scale_max,
            injection=injection,
            timing=timing,
            min_clients=min_clients,
        )
        self.compression_ratio = compression_ratio
        self.k = topk_count(layout.size, compression_ratio)
        # ScaDLES adaptive compression (adaptive_delta > 0): c or dense (c = 1), by majority.
        self.adaptive_delta = adaptive_delta
        self._configured_ratio = compression_ratio
        self._compress_next = False  # the first round is dense: nothing reported yet
        self._adaptive: dict[str, Any] | None = None
        if adaptive_delta > 0 and schedule is not None:
            raise ValueError("adaptive-delta and cr-schedule = nsga2 both choose c; use one")
        self.collective = collective
        self.leader = leader
        self.index_policy = index_policy
        self.round_timeout_s = round_timeout_s
        self._version = 0  # aggregated rounds applied to the global model
        self._last_delta: Sparse | None = None  # what took version − 1 to version
        self._holds: dict[int, int] = {}  # node id → version of its replica (when known)
        self._next_index_set: NDArray[np.int64] | None = None  # global index policy
        self._grid: Grid | None = None
        self._config = ConfigRecord()
        self._round_index_set: NDArray[np.int64] | None = None
        self._last_scores: dict[int, float] = {}  # node id → ||TopK(e)||² (VAR), for tests
        # collective = "auto": the mode of this round, and what it is chosen from
        self._mode = "allreduce" if collective == "auto" else collective
        self.estimator = LinkEstimator(window=48)
        self._union_fraction = 1.0  # last Allgather union size / (N·k)
        self._compute_s: dict[int, float] = {}  # last virtual compute time per client
        self._predicted: tuple[float | None, float | None] = (None, None)
        self.schedule = schedule  # None: the ratio stays compression-ratio
        self._payload_counts: dict[str, int] = {}  # this round: nodes per downlink payload

    # --- instructions -----------------------------------------------------------------------

    def _payload_for(self, node_id: int) -> str:
        held = self._holds.get(node_id)
        if held == self._version:
            return "current"
        if held == self._version - 1 and self._last_delta is not None:
            return "delta"
        return "full"

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._grid = grid
        if isinstance(grid, TimedGrid):
            grid.forget()  # this round's exchanges are the ones timed from here on
        self.clock.begin_round(server_round)
        if self.schedule is not None:
            links = [self.estimator.estimate(c) for c in range(self.num_clients)]
            known = [link for link in links if link is not None]
            self.compression_ratio = self.schedule.ratio_for(
                server_round,
                self.predict_round_s,
                self.compute_s(),
                known if len(known) == self.num_clients else None,
            )
            self.k = topk_count(self.layout.size, self.compression_ratio)
        if self.adaptive_delta > 0:
            self.compression_ratio = self._configured_ratio if self._compress_next else 1.0
            self.k = topk_count(self.layout.size, self.compression_ratio)
        if self.collective == "auto":
            self._mode = self._choose_mode(server_round)
        self._global = self.layout.flatten(arrays)
        # Wait for min_available_nodes, then send to every connected node.
        _, node_ids = sample_nodes(grid, self.min_available_nodes, self.min_available_nodes)
        self._config = self._round_config(config, server_round)
        self._config.update(
            {
                "server-round": server_round,
                "model-version": self._version,
                "compression-ratio": self.compression_ratio,
                "collective": self._mode,
                "report-gain": self.schedule is not None,
            }
        )
        if self.adaptive_delta > 0:
            self._config[ADAPTIVE_RATIO] = self._configured_ratio
        self._round_index_set = None
        if self._mode == "allreduce" and self.index_policy == "global":
            self._round_index_set = self._next_index_set
        payloads = {node: self._payload_for(node) for node in sorted(node_ids)}
        self._payload_counts = dict(sorted(Counter(payloads.values()).items()))
        # At most three distinct contents (full, delta, current): build and measure each once.
        contents = {p: self._instruction(p) for p in set(payloads.values())}
        sizes = {id(c): content_nbytes(c) for c in contents.values()}
        messages = self._with_relayed(
            [
                Message(content=contents[p], message_type=MessageType.TRAIN, dst_node_id=node)
                for node, p in payloads.items()
            ]
        )
        self._bytes_down = {
            m.metadata.dst_node_id: sizes.get(id(m.content)) or content_nbytes(m.content)
            for m in messages
        }
        return messages

    def _choose_mode(self, server_round: int) -> str:
        """Rounds 1 and 2 try both; then the NSGA-II schedule's choice once it has solved
        (it weighs gain as well as time), otherwise the cheaper by predicted round time."""
        self._predicted = (None, None)
        if server_round <= 2:
            return "allreduce" if server_round == 1 else "allgather"
        predicted = self.predict_round_s(self.compression_ratio)
        if predicted is not None:
            self._predicted = predicted
        if self.schedule is not None and self.schedule.collective is not None:
            return self.schedule.collective
        if predicted is None:
            return self._mode
        return "allgather" if predicted[0] <= predicted[1] else "allreduce"

    def predict_round_s(self, ratio: float) -> tuple[float, float] | None:
        """Predicted round time (Allgather, Allreduce) at ``ratio`` from the estimated links."""
        links = [self.estimator.estimate(c) for c in range(self.num_clients)]
        known = [link for link in links if link is not None]
        if len(known) < self.num_clients:
            return None
        compute = [self._compute_s.get(c, 0.0) for c in range(self.num_clients)]
        size = self.layout.size
        k = topk_count(size, ratio)
        union = min(size, math.ceil(self._union_fraction * self.num_clients * k))
        if self.topology == "star":
            return (
                star_allgather_topk_s(known, compute, k, union, size),
                star_allreduce_topk_s(known, compute, k, size),
            )
        link = Link.from_bandwidth(  # the peer collectives see the slowest link
            max(e.latency_s for e in known),
            min(min(e.uplink_bytes_per_s, e.downlink_bytes_per_s) for e in known),
        )
        n, model_bytes, slowest_compute = self.num_clients, 4 * size, max(compute)
        return (
            slowest_compute
            + peer_exchange_s(self.topology, "allgather", n, model_bytes, ratio, link),
            slowest_compute
            + peer_exchange_s(self.topology, "allreduce", n, model_bytes, ratio, link),
        )

    def compute_s(self) -> float:
        """The slowest client's last compute time (virtual), 0 before any round."""
        return max(self._compute_s.values(), default=0.0)

    def _instruction(self, payload: str) -> RecordDict:
        config = ConfigRecord(dict(self._config))
        config["payload"] = payload
        content = RecordDict({CONFIG_KEY: config})
        if payload == "full":
            assert self._global is not None
            content[MODEL_KEY] = values_record(self._global)
        elif payload == "delta":
            assert self._last_delta is not None
            config["base-version"] = self._version - 1
            content[DELTA_KEY] = self._last_delta.to_record()
        if self._round_index_set is not None:
            content[INDEX_SET_KEY] = indices_record(self._round_index_set, self.layout.size)
        return content

    # --- aggregation ------------------------------------------------------------------------

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self._global is None:
            raise RuntimeError("aggregate_train called before configure_train")
        refused: list[str] = []
        phases: list[tuple[str, list[ClientWork]]] = []
        replies = list(replies)
        train_phase = self._train_phase(replies, refused)
        failed = self._failed(replies, train_phase)
        participants = train_phase
        if self.schedule is not None:
            self.schedule.observe_gains(
                [p.gains for p in train_phase if p.gains is not None],
                [p.num_examples for p in train_phase if p.gains is not None],
            )
        works = [
            ClientWork(
                p.partition_id,
                self._bytes_down.get(p.node_id, 0),
                p.num_examples,
                p.bytes_up,
                p.stream.wait_s if p.stream is not None else 0.0,
                p.measured,
            )
            for p in train_phase
        ]
        self._note_global_batch([own_samples(p.num_examples, p.stream) for p in train_phase])
        phases.append(("train", works))
        start = time.perf_counter()
        indices: NDArray[np.int64] | None
        values: NDArray[np.float32] | None
        if self._mode == "allgather":
            indices, values = self._allgather(participants)
        elif self._round_index_set is not None:
            indices, values = self._allreduce(self._round_index_set, participants)
        else:
            participants, indices, values = self._leader_phases(
                server_round, participants, refused, phases, failed
            )
            if self.schedule is not None and participants:
                self.schedule.observe_shared_gain(_shared_index_factor(participants))
        aggregate_s = time.perf_counter() - start

        sent_version = self._version
        for node in self._bytes_down:  # unknown until a reply proves otherwise
            self._holds.pop(node, None)
        if indices is not None and values is not None and participants:
            new_global = self._global.copy()
            new_global[indices] += values  # clients apply exactly this to their replicas
            self._last_delta = Sparse(indices, values, self.layout.size)
            self._version += 1
            if self.index_policy == "global" and self._mode == "allreduce":
                self._next_index_set = topk_indices(self._last_delta.dense(), self.k)
            self._global = new_global
        for p in participants:
            self._holds[p.node_id] = sent_version
        if self.adaptive_delta > 0:
            self._vote_on_compression(train_phase)
        self._record_round(server_round, participants, refused, phases, aggregate_s, failed)
        if not participants:
            return None, None
        loss = self.stats[server_round].train_loss
        return self.layout.unflatten(self._global), MetricRecord({"train-loss": loss})

    def _vote_on_compression(self, replies: Sequence[Participant]) -> None:
        """ScaDLES: compress next round when most clients' residual share is at most δ."""
        shares = [p.residual_share for p in replies if p.residual_share is not None]
        votes = sum(share <= self.adaptive_delta for share in shares)
        self._compress_next = 2 * votes > len(shares)
        self._adaptive = {
            "votes_to_compress": votes,
            "voters": len(shares),
            "median_share": float(np.median(shares)) if shares else None,
            "compress_next_round": self._compress_next,
        }

    def _refuse(self, refused: list[str], node: int, phase: str, reason: object) -> None:
        log(WARNING, "Refused %s reply from node %s: %s", phase, node, reason)
        refused.append(f"node {node} ({phase}): {reason}")

    def _train_phase(self, replies: Sequence[Message], refused: list[str]) -> list[Participant]:
        accepted: list[Participant] = []
        seen: set[int] = set()
        expects_values = self._mode == "allreduce" and self._round_index_set is not None
        for msg in replies:
            node = msg.metadata.src_node_id
            try:
                if msg.has_error():
                    raise ValueError(f"client error: {msg.error.reason}")
                content = msg.content
                metrics = parse_train_metrics(content, self.num_clients)
                if metrics.partition_id in seen:
                    raise ValueError(f"partition-id {metrics.partition_id} already replied")
                shared = self._shared_of(content, metrics.num_examples)
                p = Participant(
                    node_id=node,
                    partition_id=metrics.partition_id,
                    num_examples=metrics.num_examples,
                    train_loss=metrics.train_loss,
                    compress_s=_compress_s(content),
                    bytes_up=content_nbytes(content),
                    stream=metrics.stream,
                )
                if self.schedule is not None:
                    p.gains = _gains(content, len(self.schedule.gain_model.grid))
                if self.adaptive_delta > 0:
                    p.residual_share = _residual_share(content)
                if self.measure:
                    p.measured = measured_times(msg, self._grid)
                if self._mode == "allgather":
                    p.sparse = Sparse.from_record(self._sparse(content), self.layout.size, self.k)
                elif expects_values:
                    assert self._round_index_set is not None
                    p.values = decode_values(self._sparse(content), self._round_index_set.size)
                else:
                    norm2 = content.metric_records[METRICS_KEY].get(TOPK_NORM2)
                    if not isinstance(norm2, int | float) or not math.isfinite(norm2) or norm2 < 0:
                        raise ValueError(f"topk-norm2 {norm2!r} is not a non-negative number")
                    p.norm2 = float(norm2)
            except (ValueError, PayloadError, KeyError) as exc:
                self._refuse(refused, node, "train", exc)
                continue
            seen.add(p.partition_id)
            self._collect_shared(node, p.partition_id, shared, msg.content)
            accepted.append(p)
        accepted.sort(key=lambda p: p.partition_id)  # completion order must not matter
        return accepted

    @staticmethod
    def _sparse(content: RecordDict) -> ArrayRecord:
        if SPARSE_KEY not in content.array_records:
            raise PayloadError(f"ArrayRecord {SPARSE_KEY!r} is missing")
        return content.array_records[SPARSE_KEY]

    def _allgather(
        self, participants: Sequence[Participant]
    ) -> tuple[NDArray[np.int64] | None, NDArray[np.float32] | None]:
        """Weighted scatter-add of every TopK(e): O(N·k) work, one d-vector of memory."""
        if not participants:
            return None, None
        sparses = [p.sparse for p in participants if p.sparse is not None]
        return scatter_add(
            [s.indices for s in sparses],
            [s.values for s in sparses],
            self._participant_weights(participants),
            self.layout.size,
        )

    def _allreduce(
        self, index_set: NDArray[np.int64], participants: Sequence[Participant]
    ) -> tuple[NDArray[np.int64] | None, NDArray[np.float32] | None]:
        if not participants:
            return None, None
        values = [p.values for p in participants if p.values is not None]
        return index_set, weighted_average(values, self._participant_weights(participants))

    def _participant_weights(self, participants: Sequence[Participant]) -> list[float]:
        return self._weights(
            [p.num_examples for p in participants], [p.stream for p in participants]
        )

    def _choose_leader(self, server_round: int, participants: Sequence[Participant]) -> Participant:
        if self.leader == "star":
            return participants[server_round % len(participants)]
        return max(participants, key=lambda p: (p.norm2, -p.partition_id))

    def _send(self, messages: list[Message]) -> list[Message]:
        assert self._grid is not None
        return list(self._grid.send_and_receive(messages, timeout=self.round_timeout_s))

    def _leader_phases(
        self,
        server_round: int,
        participants: list[Participant],
        refused: list[str],
        phases: list[tuple[str, list[ClientWork]]],
        failed: list[str],
    ) -> tuple[list[Participant], NDArray[np.int64] | None, NDArray[np.float32] | None]:
        if not participants:
            return [], None, None
        self._last_scores = {p.node_id: p.norm2 for p in participants}
        leader = self._choose_leader(server_round, participants)
        config = ConfigRecord(
            {"server-round": server_round, "compression-ratio": self.compression_ratio}
        )
        request = RecordDict({CONFIG_KEY: config})
        leader_replies = self._send(
            [
                Message(
                    content=request,
                    message_type=f"{MessageType.TRAIN}.{INDICES_ACTION}",
                    dst_node_id=leader.node_id,
                )
            ]
        )
        reply = leader_replies[0] if leader_replies else None
        index_set: NDArray[np.int64] | None = None
        measured: MeasuredTimes | None = None
        try:
            if reply is None:
                failed.append(
                    f"node {leader.node_id} (partition {leader.partition_id}) (indices): no reply"
                )
                raise ValueError("no reply")
            if reply.has_error():
                raise ValueError(f"client error: {reply.error.reason}")
            index_set = np.sort(decode_indices(self._sparse(reply.content), self.layout.size))
            if index_set.size != self.k:
                raise PayloadError(f"{index_set.size} indices, expected {self.k}")
            bytes_up = content_nbytes(reply.content)
            if self.measure:
                measured = measured_times(reply, self._grid)
        except (ValueError, PayloadError, KeyError) as exc:
            self._refuse(refused, leader.node_id, "indices", exc)
            index_set = None
            bytes_up = 0
        phases.append(
            (
                "indices",
                [
                    ClientWork(
                        leader.partition_id, content_nbytes(request), 0, bytes_up, measured=measured
                    )
                ],
            )
        )
        if index_set is None:
            return [], None, None  # without the leader's indices this round cannot aggregate
        values_request = RecordDict(
            {CONFIG_KEY: config, INDEX_SET_KEY: indices_record(index_set, self.layout.size)}
        )
        down = content_nbytes(values_request)
        by_node = {p.node_id: p for p in participants}
        replies = self._send(
            [
                Message(
                    content=values_request,
                    message_type=f"{MessageType.TRAIN}.{VALUES_ACTION}",
                    dst_node_id=p.node_id,
                )
                for p in participants
            ]
        )
        accepted: list[Participant] = []
        works: list[ClientWork] = []
        for msg in replies:
            node = msg.metadata.src_node_id
            p = by_node.get(node)
            try:
                if p is None:
                    raise ValueError("not a participant of this round")
                if msg.has_error():
                    raise ValueError(f"client error: {msg.error.reason}")
                p.values = decode_values(self._sparse(msg.content), index_set.size)
                p.compress_s += (
                    _compress_s(msg.content) if METRICS_KEY in msg.content.metric_records else 0.0
                )
                measured = measured_times(msg, self._grid) if self.measure else None
            except (ValueError, PayloadError, KeyError) as exc:
                self._refuse(refused, node, "values", exc)
                continue
            accepted.append(p)
            works.append(
                ClientWork(p.partition_id, down, 0, content_nbytes(msg.content), measured=measured)
            )
        phases.append(("values", works))
        failed.extend(
            f"node {p.node_id} (partition {p.partition_id}) (values): no usable reply"
            for p in participants
            if p not in accepted
        )
        accepted.sort(key=lambda p: p.partition_id)
        indices, values = self._allreduce(index_set, accepted)
        return accepted, indices, values

    # --- records ----------------------------------------------------------------------------

    def _record_round(
        self,
        server_round: int,
        participants: Sequence[Participant],
        refused: list[str],
        phases: Sequence[tuple[str, list[ClientWork]]],
        aggregate_s: float,
        failed: list[str],
    ) -> None:
        timings: list[PhaseTiming] = [
            self.clock.phase(name, works, self._measured_phase_s(i))
            for i, (name, works) in enumerate(phases)
        ]
        charged = self._charged(timings, phases[0][1], self._mode, self.compression_ratio)
        duration = self.clock.advance(charged)
        for (name, works), timing in zip(phases, timings, strict=True):
            for work in works:
                t = timing.clients[work.client]
                self.estimator.observe(work.client, DOWN, work.bytes_down, t.download_s)
                self.estimator.observe(work.client, UP, work.bytes_up, t.upload_s)
                if name == "train":
                    self._compute_s[work.client] = t.compute_s
        if (
            self._mode == "allgather"
            and self._last_delta is not None
            and participants
            and self.compression_ratio < 1.0  # a dense round says nothing about overlap
        ):
            self._union_fraction = self._last_delta.indices.size / (len(participants) * self.k)
        phase_rows: list[dict[str, Any]] = []
        for (name, works), timing in zip(phases, timings, strict=True):
            down = sum(w.bytes_down for w in works)
            if name == "train":
                down = sum(self._bytes_down.values())  # sent to every sampled node
            phase_rows.append(
                {
                    "name": name,
                    "duration_s": timing.duration_s,
                    "bytes_up": sum(w.bytes_up for w in works),
                    "bytes_down": down,
                    **measured_parts(timing, self.measure),
                }
            )
        if self.topology != "star":
            phase_rows = self._peer_rows(charged, phase_rows)
        weights = [p.num_examples for p in participants]
        loss = (
            float(np.average([p.train_loss for p in participants], weights=weights))
            if participants
            else math.nan
        )
        self.stats[server_round] = RoundStats(
            round=server_round,
            virtual_time_s=self.clock.now_s,
            round_time_s=duration,
            bytes_up=sum(r["bytes_up"] for r in phase_rows),
            bytes_down=sum(r["bytes_down"] for r in phase_rows),
            num_clients=len(participants),
            train_loss=loss,
            compression_ratio=self.compression_ratio,
            collective=self._mode,
            refused=refused,
            failed=failed,
            time_source="measured" if self.measure else "modelled",
            model_payloads=dict(self._payload_counts),
            phases=phase_rows,
            compress_s=max((p.compress_s for p in participants), default=0.0),
            aggregate_s=aggregate_s,
            comm_time_s=sum(t.comm_s for t in charged),
            predicted_allgather_s=self._predicted[0],
            predicted_allreduce_s=self._predicted[1],
            estimated_links=self._estimated_links() if self.collective == "auto" else None,
            ratio_solve=(
                asdict(self.schedule.last_solve)
                if self.schedule is not None and self.schedule.last_solve is not None
                else None
            ),
            learning_rate=self._learning_rate,
            adaptive=self._adaptive,
            injection=self._injection_stats,
            stream=stream_summary(
                [p.stream for p in participants],
                [own_samples(p.num_examples, p.stream) // self._local_steps for p in participants],
            ),
        )

    def _estimated_links(self) -> dict[str, list[float]]:
        """Per client: [latency ms, uplink Mbit/s, downlink Mbit/s] as estimated now."""
        out = {}
        for client in range(self.num_clients):
            e = self.estimator.estimate(client)
            if e is not None:
                out[str(client)] = [
                    round(e.latency_s * 1e3, 4),
                    round(e.uplink_bytes_per_s * 8e-6, 4),
                    round(e.downlink_bytes_per_s * 8e-6, 4),
                ]
        return out
