"""PowerSGD: low-rank aggregation (Vogels et al., NeurIPS 2019), two exchanges per round.

Each weight matrix (a convolution as out x in·kh·kw) travels as rank-r factors, the rest of the
model (vectors, the always-sent buffers) dense; compress/low_rank.py has the maths and says
which is which. ``train``: the instruction carries Q (``WARM_Q_KEY``: the last round's
aggregated Q, the warm start, in the first round a seeded draw), every client trains, holds
e = update + residual and sends P_i = M_i Q per matrix with e's dense positions. The server
averages the P_i by the aggregation weights and orthonormalises the mean: P̂. ``q``: P̂ goes to
every participant (``P_HAT_KEY``), each sends Q_i = M_iᵀ P̂ and keeps M_i - P̂ Q_iᵀ as its
residual (the dense positions were sent whole: their residual is 0). The update is P̂ Qᵀ with Q
the combined Q_i, and the combined dense values.

The defence judges and combines each client's (Q_i, dense values): with P̂ orthonormal that
vector has the norm and the pairwise cosines of the client's contribution P̂ Q_iᵀ + dense, and
the contributions share coordinates, so the coordinatewise defences apply too.

Rank: ``powersgd-rank`` when set, else from the round's compression ratio by
``low_rank.rank_for`` (r = floor(c·rows·cols / (rows + cols)), 1 to min(rows, cols)), so the
ratio schedules keep choosing c. Values travel as float32 (no value compressor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from flwr.app import ArrayRecord, Message

from common.settings import Settings
from compress import low_rank
from compress.base import ErrorFeedback, load_vector, store_vector
from compress.low_rank import Factored, FactorShape, Matrix
from strategies.collectives.base import (
    ActionHandler,
    Aggregate,
    ClientAction,
    ClientPayload,
    ClientRound,
    Indices,
    Outlook,
    Participant,
    Program,
    RoundPlan,
    Vector,
    combine,
    exchange,
    finished,
    phase_replies,
)
from strategies.collectives.cost import (
    MESSAGE_OVERHEAD_BYTES,
    DenseCost,
    Link,
    peer_cost,
    ring_allreduce,
    transfer_s,
    tree_allreduce,
)
from strategies.collectives.maths import weighted_average
from wire.codec import PayloadError, decode_values, raw_array, read_raw, values_record
from wire.keys import SPARSE_KEY, TRAIN
from wire.layout import Layout
from wire.messages import PhaseReply, PhaseRequest, TrainReply, required_sparse
from wire.nbytes import content_nbytes

Q_ACTION = "q"  # the second exchange: "train.q"
TRAIN_Q = f"{TRAIN}.{Q_ACTION}"
WARM_Q_KEY = "powersgd-q"  # a training instruction's Q, with the ranks
P_HAT_KEY = "powersgd-p"  # the q request's P̂
RANKS = "ranks"
PENDING_KEY = "powersgd-pending"  # e, held between the two exchanges
SHAPE_KEY = "powersgd-shape"  # the round's blocks and ranks, held between them
TABLE = "table"


# --- client half -----------------------------------------------------------------------------


def factors_record(ranks: Sequence[int], factors: list[Matrix]) -> ArrayRecord:
    return ArrayRecord(
        {
            RANKS: raw_array(np.asarray(ranks, dtype="<i8")),
            "values": raw_array(low_rank.flat(factors).astype("<f4")),
        }
    )


def _warm_start(job: ClientRound) -> tuple[FactorShape, list[Matrix]]:
    """The round's factor shape and the Q the instruction carries, checked against the model."""
    record = job.content.array_records.get(WARM_Q_KEY)
    if record is None:
        raise PayloadError(f"ArrayRecord {WARM_Q_KEY!r} is missing")
    matrices, dense = low_rank.blocks(job.layout, job.always_sent)
    ranks = read_raw(record, RANKS, "int64")
    if ranks.size != len(matrices):
        raise PayloadError(f"{ranks.size} ranks for {len(matrices)} matrices")
    shape = FactorShape.of(matrices, dense, job.layout.size, [int(r) for r in ranks])
    return shape, shape.split_q(decode_values(record, shape.q_count))


def _train(job: ClientRound) -> ClientPayload:
    """P_i = M_i Q per matrix, and e at the dense positions; e waits for P̂ in the state (and
    stays the residual until the second exchange takes its share)."""
    shape, warm_q = _warm_start(job)
    memory = ErrorFeedback.from_state(job.state, job.update.size)
    compensated = memory.compensate(job.update, job.error_feedback_clip, job.always_sent)
    ErrorFeedback(compensated).to_state(job.state)  # nothing has left yet
    store_vector(job.state, PENDING_KEY, compensated)
    job.state[SHAPE_KEY] = ArrayRecord({TABLE: raw_array(shape.to_table().astype("<i8").ravel())})
    p = [
        low_rank.first_factor(b.of(compensated), q)
        for b, q in zip(shape.blocks, warm_q, strict=True)
    ]
    sent = np.concatenate([low_rank.flat(p), compensated[shape.dense]])
    return ClientPayload(sparse=values_record(sent))


def _second(action: ClientAction) -> ArrayRecord:
    """Q_i = M_iᵀ P̂ per matrix; the residual keeps M_i - P̂ Q_iᵀ, and 0 where e went dense."""
    held = load_vector(action.state, PENDING_KEY)
    table = action.state.get(SHAPE_KEY)
    if held is None or not isinstance(table, ArrayRecord):
        raise ValueError("q request without a compensated update from this round's training")
    rows = read_raw(table, TABLE, "int64").astype(np.int64).reshape(-1, 4)
    shape = FactorShape.from_table(rows, held.size)
    record = action.content.array_records.get(P_HAT_KEY)
    if record is None:
        raise PayloadError(f"ArrayRecord {P_HAT_KEY!r} is missing")
    p_hat = shape.split_p(decode_values(record, shape.p_count))
    residual = held.copy()
    residual[shape.dense] = 0.0
    own_q = []
    for block, p in zip(shape.blocks, p_hat, strict=True):
        matrix = block.of(held)
        q = low_rank.second_factor(matrix, p)
        block.of(residual)[:] = low_rank.residual(matrix, p, q)
        own_q.append(q)
    ErrorFeedback(residual).to_state(action.state)
    del action.state[PENDING_KEY], action.state[SHAPE_KEY]
    return values_record(low_rank.flat(own_q))


# --- server half -----------------------------------------------------------------------------


class PowerSgd:
    name: ClassVar[str] = "powersgd"
    compressed: ClassVar[bool] = True
    gain: ClassVar[str | None] = None
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {Q_ACTION: _second}
    PEER: ClassVar[dict[str, DenseCost]] = {
        "ring": ring_allreduce,
        "tree": tree_allreduce,
    }

    @classmethod
    def from_settings(cls, settings: Settings, layout: Layout, always_sent: Indices) -> PowerSgd:
        return cls(layout, always_sent, settings.seed, settings.powersgd_rank)

    @staticmethod
    def client_train(job: ClientRound) -> ClientPayload:
        return _train(job)

    def __init__(self, layout: Layout, always_sent: Indices, seed: int, rank: int = 0) -> None:
        self.matrices, self.dense = low_rank.blocks(layout, always_sent)
        self.size = layout.size
        self.seed = seed
        self.rank = rank  # 0: from the round's compression ratio
        self.last_q: list[Matrix | None] = [None] * len(self.matrices)  # aggregated, per block

    def shape(self, ratio: float) -> FactorShape:
        ranks = [
            min(self.rank, b.rows, b.cols)
            if self.rank
            else low_rank.rank_for(ratio, b.rows, b.cols)
            for b in self.matrices
        ]
        return FactorShape.of(self.matrices, self.dense, self.size, ranks)

    def warm_q(self, shape: FactorShape) -> list[Matrix]:
        """The last aggregated Q of each matrix at this round's rank: its first columns, and
        seeded new ones where the rank grew (every client gets the same)."""
        out = []
        for block, rank, last in zip(shape.blocks, shape.ranks, self.last_q, strict=True):
            drawn = low_rank.initial_q(block.cols, rank, self.seed)
            if last is not None:
                kept = min(rank, last.shape[1])
                drawn[:, :kept] = last[:, :kept]
            out.append(drawn)
        return out

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        shape = self.shape(ratio)
        return {WARM_Q_KEY: factors_record(shape.ranks, self.warm_q(shape))}

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        return frozenset({SPARSE_KEY})

    def round_index_set(self) -> Indices | None:
        return None

    def round_hint_count(self) -> int:
        return 0

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector:
        """P_i per matrix, then the dense values."""
        shape = self.shape(plan.ratio)
        return decode_values(required_sparse(reply.sparse), shape.p_count + shape.dense.size)

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        if not participants:
            return finished(Aggregate([], None))
        return self._exchange_q(plan, participants, self.shape(plan.ratio))

    def _exchange_q(
        self, plan: RoundPlan, participants: list[Participant], shape: FactorShape
    ) -> Program:
        sent = {p.node_id: p.contribution for p in participants}  # P_i, then dense values
        mean_p = weighted_average(
            [v[: shape.p_count] for v in sent.values()],  # type: ignore[index]
            plan.weights(participants),
        )
        p_hat = [low_rank.orthonormalise(p) for p in shape.split_p(mean_p)]
        content = PhaseRequest(plan.server_round, plan.ratio).to_content()
        content[P_HAT_KEY] = values_record(low_rank.flat(p_hat))

        def read(p: Participant, msg: Message) -> Vector:
            own_q = decode_values(PhaseReply.sparse_of(msg.content), shape.q_count)
            return np.concatenate([own_q, sent[p.node_id][shape.p_count :]])  # type: ignore[index]

        replies = yield from exchange(
            [
                Message(content=content, dst_node_id=p.node_id, message_type=TRAIN_Q)
                for p in participants
            ]
        )
        bytes_down = content_nbytes(content)
        accepted = phase_replies(plan, participants, Q_ACTION, bytes_down, replies, read)
        defended = yield from combine(accepted, Q_ACTION, self._positions(shape))
        combined = defended.combined
        if combined is None:
            return Aggregate([], None)
        accepted = defended.participants
        combined_q = shape.split_q(combined[: shape.q_count])
        self.last_q = [q.copy() for q in combined_q]
        factored = Factored(shape, tuple(p_hat), tuple(combined_q), combined[shape.q_count :])
        return Aggregate(accepted, factored.to_sparse(), compact=factored)

    def star_round_s(self, outlook: Outlook) -> float:
        """Two exchanges. ``train``: down the last update as factors and this round's Q,
        compute, up P_i and the dense values; ``q``: down P̂, up Q_i. 4 bytes a value."""
        shape = self.shape(outlook.ratio)
        p, q, dense, table = shape.p_count, shape.q_count, shape.dense.size, 32 * len(shape.blocks)
        ov = MESSAGE_OVERHEAD_BYTES
        down = 4 * (p + 2 * q + dense) + 2 * table + ov
        train = max(
            transfer_s(link, down, False) + c + transfer_s(link, 4 * (p + dense) + ov, True)
            for link, c in zip(outlook.links, outlook.compute_s, strict=True)
        )
        exchange_q = max(
            transfer_s(link, 4 * p + ov, False) + transfer_s(link, 4 * q + ov, True)
            for link in outlook.links
        )
        return train + exchange_q

    def peer_exchange_s(
        self, topology: str, n: int, model_bytes: float, ratio: float, link: Link
    ) -> float:
        """Two allreduces, as PowerSGD runs on peers: the P_i with the dense values, then the
        Q_i (``model_bytes`` is not read: the factors' sizes follow from the ratio)."""
        allreduce = peer_cost(self.PEER, topology, self.name)
        shape = self.shape(ratio)
        first = 4 * (shape.p_count + shape.dense.size)
        return allreduce(n, first, link) + allreduce(n, 4 * shape.q_count, link)

    def _positions(self, shape: FactorShape) -> Indices:
        """Where each entry of a (Q_i, dense) vector sits in the model: a Q entry in its matrix
        (never a buffer), a dense value at its position (the defence leaves buffers out)."""
        starts = [
            np.full(b.cols * r, b.start, dtype=np.int64)
            for b, r in zip(shape.blocks, shape.ranks, strict=True)
        ]
        return np.concatenate([*starts, shape.dense])
