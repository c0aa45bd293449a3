"""PowerSGD: low-rank aggregation (Vogels et al., NeurIPS 2019), two exchanges per round.

Each weight matrix (a convolution as out x in·kh·kw) travels as rank-r factors, the rest of the
model (vectors, the buffers sent whole) dense; compress/low_rank.py has the maths and says
which is which. ``train``: the instruction carries Q (``WARM_Q_KEY``: the last round's
aggregated Q, the warm start, in the first round a seeded draw), every client trains, holds
e = update + residual and sends P_i = M_i Q per matrix with e's dense positions. The server
combines the P_i by the aggregation weights and orthonormalises the mean: P̂. ``q``: P̂ goes to
every participant (``P_HAT_KEY``), each sends Q_i = M_iᵀ P̂ and keeps M_i - P̂ Q_iᵀ as its
residual (the dense positions were sent whole: their residual is 0). The update is P̂ Qᵀ with Q
the combined Q_i, and the combined dense values.

The defence meets each exchange. It combines the P_i into the mean P̂ is made of (a hostile
P_i would otherwise choose the subspace), leaving out the partitions it has judged against;
it screens and combines each client's (Q_i, dense values), which with P̂ orthonormal has the
norm and the pairwise cosines of the client's contribution P̂ Q_iᵀ + dense: a screen sees one
vector a client a round, as with the other collectives. Both exchanges' vectors share
coordinates across clients, so the coordinatewise defences apply too.

Rank: ``powersgd-rank`` when set, else from the round's compression ratio by
``low_rank.rank_for`` (r = floor(c·rows·cols / (rows + cols)), 1 to min(rows, cols); at c = 1
the full rank), so the ratio schedules keep choosing c. Values travel as float32 (no value
compressor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord, Message

from collectives.base import (
    ARRAYS,
    VECTOR_ENTRY,
    ActionHandler,
    Aggregate,
    ClientAction,
    ClientJob,
    ClientPayload,
    Collective,
    Indices,
    Outlook,
    Participant,
    RoundPlan,
    Vector,
)
from collectives.program import Program, combine, exchange, phase_replies
from common.settings import Settings
from compress import ENCODINGS, SELECTORS, low_rank
from compress.error_feedback import ErrorFeedback
from compress.float32 import Float32
from compress.low_rank import Factored, FactorShape, Matrix
from compress.topk import TopK
from state.archive import StateError
from state.fields import Fields
from state.vectors import drop_vector, load_vector, store_vector
from timing.cost import (
    MESSAGE_OVERHEAD_BYTES,
    RING,
    TREE,
    Link,
    peer_cost,
    ring_allreduce,
    star_phase_s,
    tree_allreduce,
)
from wire.codec import (
    PayloadError,
    decode_values,
    index_nbytes,
    raw_array,
    read_raw,
    values_record,
)
from wire.keys import TRAIN, VALUES
from wire.layout import Layout
from wire.nbytes import content_nbytes
from wire.phases import PhaseReply, PhaseRequest, required_sparse
from wire.train_reply import TrainReply

Q_ACTION = "q"  # the second exchange: "train.q"
TRAIN_Q = f"{TRAIN}.{Q_ACTION}"
WARM_Q_KEY = "powersgd-q"  # a training instruction's Q, with the ranks
P_HAT_KEY = "powersgd-p"  # the q request's P̂
RANKS = "ranks"
PENDING_KEY = "powersgd-pending"  # e, held between the two exchanges
SHAPE_KEY = "powersgd-shape"  # the round's blocks and ranks, held between them
TABLE = "table"
ROUND = "round"  # the round whose training the held update is of


# --- client half -----------------------------------------------------------------------------


def factors_record(ranks: Sequence[int], factors: list[Matrix]) -> ArrayRecord:
    return ArrayRecord(
        {
            RANKS: raw_array(np.asarray(ranks, dtype="<i8")),
            VALUES: raw_array(low_rank.flat(factors).astype("<f4")),
        }
    )


def exact_values(record: ArrayRecord, count: int, also: frozenset[str] = frozenset()) -> Vector:
    """``count`` finite float32 values, in a record that carries nothing else (``also``: the
    other arrays it must hold): an array nobody reads would still be received and charged."""
    if set(record) != {VALUES} | also:
        names = ", ".join(sorted(set(record)))
        raise PayloadError(f"arrays {names}, expected {', '.join(sorted({VALUES} | also))}")
    return decode_values(record, count)


def _warm_start(job: ClientJob) -> tuple[FactorShape, list[Matrix]]:
    """The round's factor shape and the Q the instruction carries, checked against the model."""
    record = job.content.array_records.get(WARM_Q_KEY)
    if record is None:
        raise PayloadError(f"ArrayRecord {WARM_Q_KEY!r} is missing")
    matrices, dense = low_rank.blocks(job.layout, job.whole)
    ranks = read_raw(record, RANKS, "int64")
    if ranks.size != len(matrices):
        raise PayloadError(f"{ranks.size} ranks for {len(matrices)} matrices")
    shape = FactorShape.of(matrices, dense, job.layout.size, [int(r) for r in ranks])
    return shape, shape.split_q(exact_values(record, shape.q_count, frozenset({RANKS})))


def _train(job: ClientJob) -> ClientPayload:
    """P_i = M_i Q per matrix, and e at the dense positions; e waits for P̂ in the state (and
    stays the residual until the second exchange takes its share)."""
    shape, warm_q = _warm_start(job)
    # the dense positions are sent as they are: a clip leaves them
    compensated = job.compensated(np.union1d(job.whole, shape.dense))
    ErrorFeedback(compensated).to_state(job.state)  # nothing has left yet
    store_vector(job.state, PENDING_KEY, compensated)
    job.state[SHAPE_KEY] = ArrayRecord(
        {
            TABLE: raw_array(shape.to_table().astype("<i8").ravel()),
            ROUND: raw_array(np.array([job.instruction.round.server_round], dtype="<i8")),
        }
    )
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
    (trained_in,) = read_raw(table, ROUND, "int64")
    if trained_in != action.request.server_round:  # a late request: nothing is touched
        raise ValueError(
            f"q request of round {action.request.server_round}, but the update held is of "
            f"round {trained_in}"
        )
    rows = read_raw(table, TABLE, "int64").astype(np.int64).reshape(-1, 4)
    shape = FactorShape.from_table(rows, held.size)
    record = action.content.array_records.get(P_HAT_KEY)
    if record is None:
        raise PayloadError(f"ArrayRecord {P_HAT_KEY!r} is missing")
    p_hat = shape.split_p(exact_values(record, shape.p_count))
    residual = held.copy()
    residual[shape.dense] = 0.0
    own_q = []
    for block, p in zip(shape.blocks, p_hat, strict=True):
        matrix = block.of(held)
        q = low_rank.second_factor(matrix, p)
        block.of(residual)[:] = low_rank.residual(matrix, p, q)
        own_q.append(q)
    ErrorFeedback(residual).to_state(action.state)
    drop_vector(action.state, PENDING_KEY)
    del action.state[SHAPE_KEY]
    return values_record(low_rank.flat(own_q))


# --- server half -----------------------------------------------------------------------------


class PowerSgd(Collective):
    name: ClassVar[str] = "powersgd"
    own_settings: ClassVar[tuple[str, ...]] = ("powersgd-rank",)
    aligned: ClassVar[bool] = True  # the same P̂ and Q
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {Q_ACTION: _second}
    ALLREDUCES = {RING: ring_allreduce, TREE: tree_allreduce}
    client_state = {PENDING_KEY: VECTOR_ENTRY, SHAPE_KEY: ARRAYS}

    @classmethod
    def check(cls, settings: Settings) -> list[str]:
        errors = []
        compression = settings.compression
        if SELECTORS[compression.selector].draws or ENCODINGS[compression.encoding] is not Float32:
            errors.append(
                f"collective {cls.name!r} sends low-rank factors as float32: it selects no "
                f"coordinates and encodes no values (selector = {TopK.name!r}, encoding = "
                f"{Float32.name!r} with it; got {compression.selector!r}, "
                f"{compression.encoding!r})"
            )
        if settings.ratio.adaptive_delta > 0:
            errors.append(
                "adaptive-delta votes on the residual share Top-k leaves; collective "
                f"{cls.name!r} leaves another (adaptive-delta = 0 with it)"
            )
        return errors

    @classmethod
    def from_settings(
        cls, settings: Settings, layout: Layout, whole: Indices, step_is_aggregate: bool = True
    ) -> Self:
        # The replicas get factors when the step applied is the aggregate itself; else the
        # whole update (strategies/replicas.py)
        rank = settings.collective.powersgd_rank
        return cls(layout, whole, settings.run.seed, rank, step_is_aggregate)

    @staticmethod
    def client_train(job: ClientJob) -> ClientPayload:
        return _train(job)

    def __init__(
        self,
        layout: Layout,
        whole: Indices,
        seed: int,
        rank: int = 0,
        factored_deltas: bool = True,
    ) -> None:
        self.matrices, self.dense = low_rank.blocks(layout, whole)
        self.size = layout.size
        self.seed = seed
        self.rank = rank  # 0: from the round's compression ratio
        self.factored_deltas = factored_deltas  # what the prediction assumes the replicas get
        self.last_q: list[Matrix | None] = [None] * len(self.matrices)  # aggregated, per block

    def state_dict(self) -> dict[str, object]:
        """The last aggregated Q of each matrix (the next round's warm start), or null."""
        return {"schema": self.STATE_SCHEMA, "last_q": list(self.last_q)}

    def load_state_dict(self, state: object) -> None:
        fields = Fields(f"collective {self.name}", state, self.STATE_SCHEMA)
        last_q = fields.raw("last_q")
        fields.done()
        if not isinstance(last_q, list) or len(last_q) != len(self.matrices):
            raise StateError(f"collective {self.name}: last_q is not one entry a matrix")
        for block, q in zip(self.matrices, last_q, strict=True):
            fits = isinstance(q, np.ndarray) and q.dtype == np.float32 and q.ndim == 2
            if q is not None and not (
                fits and q.shape[0] == block.cols and q.shape[1] <= min(block.rows, block.cols)
            ):
                raise StateError(
                    f"collective {self.name}: a Q that fits no {block.rows}x{block.cols}"
                )
        self.last_q = [None if q is None else q.copy() for q in last_q]

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
        seeded new ones where the rank grew or a column died (a column of P̂ zeroed as
        dependent gives a zero column of Q, which would keep P's column zero for good).
        Every client gets the same."""
        out = []
        for block, rank, last in zip(shape.blocks, shape.ranks, self.last_q, strict=True):
            drawn = low_rank.initial_q(block.cols, rank, self.seed)
            if last is not None:
                kept = last[:, : min(rank, last.shape[1])]
                norms = np.linalg.norm(kept, axis=0)
                alive = norms > low_rank.DEPENDENT_COLUMN * norms.max(initial=0.0)
                drawn[:, : kept.shape[1]][:, alive] = kept[:, alive]
            out.append(drawn)
        return out

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        shape = self.shape(ratio)
        return {WARM_Q_KEY: factors_record(shape.ranks, self.warm_q(shape))}

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector:
        """P_i per matrix, then the dense values."""
        shape = self.shape(plan.ratio)
        return exact_values(required_sparse(reply.sparse), shape.p_count + shape.dense.size)

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        if not participants:
            return Aggregate([], None)
        shape = self.shape(plan.ratio)
        sent: dict[int, Vector] = {}  # P_i, then the dense values
        for p in participants:
            assert isinstance(p.contribution, np.ndarray)
            sent[p.node_id] = p.contribution
            p.contribution = p.contribution[: shape.p_count]
        # P̂ is the defence's combination of the P_i (a hostile P_i would choose the subspace),
        # unscreened: the same clients' (Q_i, dense) vectors are screened, one a round
        defended = yield from combine(participants, TRAIN, _where(shape, "p"), judge=False)
        if defended.combined is None:
            return Aggregate([], None)
        participants = defended.participants  # the refused are asked for no Q_i
        p_hat = [low_rank.orthonormalise(p) for p in shape.split_p(defended.combined)]
        content = PhaseRequest(plan.server_round, plan.ratio).to_content()
        content[P_HAT_KEY] = values_record(low_rank.flat(p_hat))

        def read(p: Participant, msg: Message) -> Vector:
            own_q = exact_values(PhaseReply.sparse_of(msg.content), shape.q_count)
            return np.concatenate([own_q, sent[p.node_id][shape.p_count :]])

        replies = yield from exchange(
            [
                Message(content=content, dst_node_id=p.node_id, message_type=TRAIN_Q)
                for p in participants
            ]
        )
        bytes_down = content_nbytes(content)
        accepted = phase_replies(plan, participants, Q_ACTION, bytes_down, replies, read)
        defended = yield from combine(accepted, Q_ACTION, _where(shape, "q"))
        combined = defended.combined
        if combined is None:
            return Aggregate([], None)
        accepted = defended.participants
        combined_q = shape.split_q(combined[: shape.q_count])
        self.last_q = [q.copy() for q in combined_q]
        factored = Factored(shape, tuple(p_hat), tuple(combined_q), combined[shape.q_count :])
        return Aggregate(accepted, factored.to_sparse(), compact=factored)

    def star_round_s(self, outlook: Outlook) -> float:
        """Two exchanges. ``train``: down the last update (as factors, or whole when the
        server's step is not the aggregate itself) and this round's Q, compute, up P_i and the
        dense values; ``q``: down P̂, up Q_i. 4 bytes a value."""
        shape = self.shape(outlook.ratio)
        p, q, dense, table = shape.p_count, shape.q_count, shape.dense.size, 32 * len(shape.blocks)
        ov = MESSAGE_OVERHEAD_BYTES
        if self.factored_deltas:
            delta = 4 * (p + q + dense) + table
        else:
            delta = 4 * self.size + index_nbytes(self.size, self.size)
        down = delta + 4 * q + table + ov
        train = star_phase_s(outlook.links, down, 4 * (p + dense) + ov, outlook.compute_s)
        exchange_q = star_phase_s(outlook.links, 4 * p + ov, 4 * q + ov)
        return train + exchange_q

    def peer_exchange_s(
        self, topology: str, n: int, model_bytes: float, ratio: float, link: Link
    ) -> float:
        """Two allreduces, as PowerSGD runs on peers: the P_i with the dense values, then the
        Q_i (``model_bytes`` is not read: the factors' sizes follow from the ratio)."""
        allreduce = peer_cost(self.ALLREDUCES, topology, self.name)
        shape = self.shape(ratio)
        first = 4 * (shape.p_count + shape.dense.size)
        return allreduce(n, first, link) + allreduce(n, 4 * shape.q_count, link)


def _where(shape: FactorShape, side: str) -> Indices:
    """Where each entry of a client's P_i (``side`` "p") or (Q_i, dense values) (``side``
    "q") sits in the model: a factor's entry in its matrix (never a buffer), a dense value at
    its position (the defence leaves buffers out of its comparisons)."""
    lengths = {"p": [b.rows for b in shape.blocks], "q": [b.cols for b in shape.blocks]}[side]
    factors = [
        np.full(length * rank, block.start, dtype=np.int64)
        for block, length, rank in zip(shape.blocks, lengths, shape.ranks, strict=True)
    ]
    dense = [shape.dense] if side == "q" else []
    return np.concatenate([*factors, *dense]) if factors or dense else np.zeros(0, np.int64)
