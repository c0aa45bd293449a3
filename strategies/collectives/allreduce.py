"""Allreduce-compatible Top-k: every client sends values at one shared index set I.

Uplinks carry values only, so the values can be summed as an allreduce would. Where I comes
from is the index policy:
- ``leader`` (the papers'): three phases. ``train``: every client trains, holds
  e = update + residual in its state and reports ||TopK(e)||²; ``indices``: the leader (STAR:
  the client at position round mod N by partition id; VAR: the largest ||TopK(e)||²) sends the
  Top-k indices of its e; ``values``: I goes to everyone, each sends e[I] and keeps the rest.
- one phase (in neither paper): I travels with the instructions, so clients send e[I] at once
  (the first round uses the leader phases). ``residual-hints``: I from the clients' reported
  residual indices and the server's estimate of their residuals (``ResidualHints``);
  ``global``: the Top-k of the previous aggregate, which freezes (``PreviousTopk``).
A model's buffers are in every I (``ClientRound.always_sent``) and never take one of its k
slots: the leader's indices, its VAR score and the one-phase policies' picks leave them out.
A leader is judged twice: its values at its own indices must have the energy it claimed, and
the others must hold some of their Top-k energy at its index set (``INDEX_SHARE_FLOOR``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Protocol

import numpy as np
from flwr.app import ArrayRecord, Message
from flwr.common.constant import SUPERLINK_NODE_ID
from numpy.typing import NDArray

from common.settings import Settings
from compress.base import ErrorFeedback, drop_vector, load_vector, send_at, store_vector
from compress.topk import sent_count, topk_energy, topk_indices, topk_outside
from strategies.collectives.base import (
    SHARED_INDEX_GAIN,
    ActionHandler,
    Aggregate,
    ClientAction,
    ClientPayload,
    ClientRound,
    Defended,
    Indices,
    Outlook,
    Participant,
    Phase,
    Program,
    Replies,
    RoundPlan,
    Vector,
    combine,
    exchange,
    phase_replies,
    screen,
)
from timing.cost import (
    MESSAGE_OVERHEAD_BYTES,
    Link,
    LinkLike,
    PeerCost,
    artopk_ring,
    artopk_tree,
    peer_cost,
    transfer_s,
)
from wire.codec import (
    PayloadError,
    Sparse,
    decode_indices,
    index_nbytes,
    indices_record,
    topk_count,
)
from wire.keys import (
    INDEX_SET_KEY,
    SPARSE_KEY,
    TRAIN,
)
from wire.layout import Layout
from wire.nbytes import content_nbytes
from wire.phases import PhaseReply, PhaseRequest, count_in, index_set_of, required_sparse
from wire.tally import ClientWork
from wire.train_reply import TrainReply

# Allreduce's own names on the wire
TOPK_NORM2 = "topk-norm2"  # a leader-phase training reply's ||TopK(e)||² (the VAR score)
HINT_COUNT = "hint-count"  # residual-hints: how many residual indices to report
HINTS_KEY = "residual-hints"  # residual-hints: where a client's residual is largest
INDICES_ACTION = "indices"  # the index phase: "train.indices"
VALUES_ACTION = "values"  # the value phase: "train.values"
TRAIN_INDICES = f"{TRAIN}.{INDICES_ACTION}"
TRAIN_VALUES = f"{TRAIN}.{VALUES_ACTION}"

PENDING_KEY = "ef-pending"  # e, held between the training and the value phase
OWN_INDICES_KEY = "ef-pending-indices"  # TopK(e) outside the buffers: the leader's index set
CLAIM_TOLERANCE = 0.05  # relative: 8-bit values change the energy by far less
# Clients train one model at one learning rate on batches from one data set: their Top-k
# energies differ by a few times (at most 5.7x the median of the others' in the honest runs of
# benchmarks/claim_spread.py, non-IID and rate-sized batches among them), never by a hundred.
CLAIM_SPREAD = 100.0
MIN_CLAIMS = 3
# An honest leader's I is its own Top-k, and clients of one model hold much of their Top-k
# energy there: the median over the others of ||e[I]||² / ||TopK(e)||² was at least 0.048
# (Dirichlet 0.1), 0.18-0.23 with IID data, in the honest runs of benchmarks/claim_spread.py. An
# index set where they hold almost none was not chosen for the model (indices 0..k-1 of the
# MLP: 0.008-0.01, and training stops, A20 0.11 against 0.96; benchmarks/attacks.py ``var-pin``).
# The floor is less than half the least honest share. A random set of k is not caught (about
# c / (Top-k's share of ||e||²), like an honest non-IID leader's) and only slows a round. A
# false alarm costs little: that leader leads no more, and the round goes on with the
# others' values.
INDEX_SHARE_FLOOR = 0.02
MIN_JUDGES = 3  # other trusted clients whose shares judge a leader's index set


# --- client half -----------------------------------------------------------------------------


def _train(job: ClientRound) -> ClientPayload:
    """One-phase index policies: e[I] now (and where the residual is largest, when asked).
    Leader: hold e, report ||TopK(e)||² (the VAR score)."""
    assert job.instruction.compression is not None
    size = job.update.size
    compensated = ErrorFeedback.from_state(job.state, size).compensate(
        job.update, job.error_feedback_clip, job.always_sent
    )
    index_set = index_set_of(job.content, size)
    if index_set is not None:
        encoded = send_at(job.state, compensated, index_set, job.compressor, job.rng)
        records = {}
        if count := count_in(job.content, HINT_COUNT, size):
            residual = ErrorFeedback.from_state(job.state, size).residual
            records[HINTS_KEY] = indices_record(topk_indices(residual, count), size)
        return ClientPayload(sparse=ArrayRecord(encoded.arrays), records=records)
    store_vector(job.state, PENDING_KEY, compensated)
    k = topk_count(size, job.instruction.compression.ratio)
    own = topk_outside(compensated, k, job.always_sent)
    job.state[OWN_INDICES_KEY] = indices_record(own, size)
    return ClientPayload(metrics={TOPK_NORM2: topk_energy(compensated, own)})


NOT_HELD = "request without a compensated update from this round's training"


def _held(action: ClientAction) -> Vector:
    held = load_vector(action.state, PENDING_KEY)
    if held is None:
        raise ValueError(NOT_HELD)
    return held


def _indices(action: ClientAction) -> ArrayRecord:
    """The leader: the Top-k indices of its held e outside the buffers (chosen in training)."""
    if PENDING_KEY not in action.state:  # checked, not read: e itself is sent in the next phase
        raise ValueError(NOT_HELD)
    own = action.state.get(OWN_INDICES_KEY)
    if not isinstance(own, ArrayRecord):
        raise ValueError("request without Top-k indices from this round's training")
    return own


def _values(action: ClientAction) -> ArrayRecord:
    """Everyone: the compressor's encoding of e[I]; the residual keeps the rest."""
    held = _held(action)
    index_set = index_set_of(action.content, held.size)
    if index_set is None:
        raise ValueError("values request without an index set")
    encoded = send_at(action.state, held, index_set, action.compressor, action.rng)
    drop_vector(action.state, PENDING_KEY)  # once sent: a failure before keeps it
    action.state.pop(OWN_INDICES_KEY, None)
    return ArrayRecord(encoded.arrays)


# --- server half -----------------------------------------------------------------------------


def claim_of(p: Participant) -> float:
    """A participant's ||TopK(e)||² claim (its decode checked it is there and >= 0)."""
    return p.reply.collective_metrics.get(TOPK_NORM2, 0.0)


def _star_leader(server_round: int, participants: Sequence[Participant]) -> Participant:
    return participants[server_round % len(participants)]


def _var_leader(server_round: int, participants: Sequence[Participant]) -> Participant:
    return max(participants, key=lambda p: (claim_of(p), -p.partition_id))


Hints = Sequence[tuple[float, Indices]]  # (a client's aggregation weight, its residual indices)


def hint_count(k: int, share: float) -> int:
    """Residual indices a client reports with an index set of ``k`` (0 when share is 0)."""
    return 0 if share <= 0 else max(1, min(k, math.ceil(share * k)))


class IndexPolicy(Protocol):
    hint_share: float  # residual indices per client, as a share of k (0: none asked)
    one_phase: bool  # I travels with the instructions (after round 1)

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        """The next round's index set from this round's aggregated update (None: a leader's),
        ``k`` indices outside ``excluded`` (the model's buffers, added to every I anyway)."""
        ...


class LeaderEachRound:
    """The papers' policy: every round's I comes from its leader (three phases)."""

    hint_share = 0.0
    one_phase = False

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        return None


class PreviousTopk:
    """``global``: the Top-k of the previous aggregate. It freezes: that update is non-zero
    exactly on the previous I, so its Top-k is I again. Kept for reference."""

    hint_share = 0.0
    one_phase = True

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        return topk_outside(update.dense(), k, excluded)


class ResidualHints:
    """``residual-hints``: one phase, and I learns where the clients' residuals are.

    Each client reports, with its values, the indices of its ``hint_share`` x k largest
    residual entries (indices only: a cheap sketch of where its unsent mass sits). The next I
    takes up to half of k from those hints, most voted first (votes weighted like the
    aggregation, so a client sways at most its own weight), and the rest from the server's
    estimate of the mean residual: error feedback empties a coordinate when it is sent and it
    then grows by about its per-round update, so a value sent after ``age`` rounds unsent
    gives the rate |value| / age, and the estimate is rate x rounds since it was last sent.
    Coordinates never sent take the median known rate and every rate has a floor
    (``RATE_FLOOR`` x that median), so an unsent coordinate's estimate grows without bound and
    every coordinate's residual is eventually sent.
    """

    RATE_FLOOR = 1e-3
    HINTED_SHARE = 0.5  # of k, at most, taken from the hints
    one_phase = True

    def __init__(self, hint_share: float) -> None:
        self.hint_share = hint_share
        self.age: NDArray[np.float64] | None = None  # rounds of accumulation, counting the next
        self.rate: NDArray[np.float64] | None = None  # NaN: never sent

    def estimate(self, update: Sparse, excluded: Indices) -> NDArray[np.float64]:
        """Observe this round's aggregate; the estimated residual of the next round. The
        typical rate is the weights' (``excluded``: the buffers, sent every round)."""
        if self.age is None or self.rate is None or self.age.size != update.size:
            self.age = np.ones(update.size)
            self.rate = np.full(update.size, np.nan)
        sent = update.indices
        self.rate[sent] = np.abs(update.values.astype(np.float64)) / self.age[sent]
        self.age += 1.0
        self.age[sent] = 1.0
        known = np.isfinite(self.rate)
        rated = known.copy()
        rated[excluded] = False
        typical = float(np.median(self.rate[rated])) if rated.any() else 1.0
        typical = typical if typical > 0 else 1.0
        rate = np.where(known, np.maximum(self.rate, self.RATE_FLOOR * typical), typical)
        return rate * self.age

    def next_index_set(
        self, update: Sparse, k: int, hints: Hints, excluded: Indices
    ) -> Indices | None:
        score = self.estimate(update, excluded)
        votes = np.zeros(update.size)
        for weight, indices in hints:
            votes[indices] += weight
        votes[excluded] = 0.0
        score[excluded] = 0.0  # passed over by the fill, like the hinted ones below
        k = min(k, update.size - excluded.size)
        voted = np.flatnonzero(votes > 0)
        slots = min(voted.size, int(self.HINTED_SHARE * k))
        # most votes first, then the larger estimate, then the lower index
        order = np.lexsort((voted, -score[voted], -votes[voted]))
        hinted = voted[order[:slots]]
        score[hinted] = 0.0  # every other score is positive: the fill passes them over
        rest = topk_indices(score.astype(np.float32), k - slots) if k > slots else hinted[:0]
        return np.sort(np.concatenate([hinted, rest]))


Leader = Callable[[int, Sequence[Participant]], Participant]
LEADERS: dict[str, Leader] = {"star": _star_leader, "var": _var_leader}
# index policy -> a new policy object, given the share of k clients report as residual hints
INDEX_POLICIES: dict[str, Callable[[float], IndexPolicy]] = {
    "leader": lambda hint_share: LeaderEachRound(),
    "global": lambda hint_share: PreviousTopk(),
    "residual-hints": ResidualHints,
}


def implausible_claims(participants: Sequence[Participant]) -> dict[int, str]:
    """Node id -> why its ||TopK(e)||² claim is refused: more than ``CLAIM_SPREAD`` x the median
    of the others' claims (a claim the server can only check after it has led a round). From
    three claims up: of two, either may be the odd one."""
    claims = [claim_of(p) for p in participants]
    reasons: dict[int, str] = {}
    if len(claims) < MIN_CLAIMS:
        return reasons
    for i, p in enumerate(participants):
        typical = float(np.median(claims[:i] + claims[i + 1 :]))  # never empty: MIN_CLAIMS
        if typical > 0.0 and claims[i] > CLAIM_SPREAD * typical:
            reasons[p.node_id] = (
                f"topk-norm2 {claims[i]:g} exceeds {CLAIM_SPREAD:g} x the median of the "
                f"others' claims ({typical:g})"
            )
    return reasons


def own_topk_share(p: Participant, chosen: NDArray[np.bool_]) -> float | None:
    """||e[I]||² / ||TopK(e)||² of one client, at most 1: how much of its own Top-k energy it
    sent at the leader's indices (1 for the leader). Both over the weights: ``chosen`` marks
    the entries of I that are not buffers, as TopK(e) leaves buffers out. None before its
    values came."""
    values, norm2 = p.contribution, claim_of(p)
    if not isinstance(values, np.ndarray):
        return None
    at = values[chosen]
    energy = float(at.astype(np.float64) @ at)
    return min(1.0, energy / norm2) if norm2 > 0 else 1.0


def shared_index_factor(participants: Sequence[Participant], chosen: NDArray[np.bool_]) -> float:
    """Mean over clients (by examples) of their ``own_topk_share``."""
    shares, weights = [], []
    for p in participants:
        share = own_topk_share(p, chosen)
        if share is not None:
            shares.append(share)
            weights.append(p.num_examples)
    return float(np.average(shares, weights=weights))


def others_share(
    leader: Participant, judges: Sequence[Participant], chosen: NDArray[np.bool_]
) -> float | None:
    """The median over the ``judges`` other than the leader of their ``own_topk_share`` at
    its index set; None with fewer than ``MIN_JUDGES`` of them."""
    shares = [
        share
        for p in judges
        if p is not leader and (share := own_topk_share(p, chosen)) is not None
    ]
    return float(np.median(shares)) if len(shares) >= MIN_JUDGES else None


class Allreduce:
    name: ClassVar[str] = "allreduce"
    compressed: ClassVar[bool] = True
    gain: ClassVar[str | None] = SHARED_INDEX_GAIN
    own_settings: ClassVar[tuple[str, ...]] = ("index-policy", "leader", "index-hints")
    reply_metrics: ClassVar[frozenset[str]] = frozenset({TOPK_NORM2})
    aligned: ClassVar[bool] = True  # the shared index set
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {
        INDICES_ACTION: _indices,
        VALUES_ACTION: _values,
    }
    PEER: ClassVar[dict[str, PeerCost]] = {"ring": artopk_ring, "tree": artopk_tree}

    @staticmethod
    def client_train(job: ClientRound) -> ClientPayload:
        return _train(job)

    @classmethod
    def from_settings(cls, settings: Settings, layout: Layout, always_sent: Indices) -> Allreduce:
        return cls(
            layout.size, settings.leader, settings.index_policy, settings.index_hints, always_sent
        )

    def __init__(
        self,
        size: int,  # the model's length, for the index set's encoding
        leader: str = "star",
        index_policy: str = "leader",
        index_hints: float = 0.0,
        always_sent: Indices | None = None,
    ) -> None:
        self.size = size
        # the model's buffers: in every index set (see ClientRound.always_sent)
        self.always_sent = np.zeros(0, dtype=np.int64) if always_sent is None else always_sent
        self.choose_leader = LEADERS[leader]
        self.index_policy = INDEX_POLICIES[index_policy](index_hints)
        # one-phase policies: the index set sent with a round's instructions, kept until the
        # round's aggregate chooses the next one
        self._index_set: Indices | None = None
        self.caught: set[int] = set()  # partitions whose norm claim their values contradicted

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        if self._index_set is None:
            return {}
        return {INDEX_SET_KEY: indices_record(self._index_set, self.size)}

    def round_config(self) -> dict[str, int | float]:
        count = self._hint_count()
        return {HINT_COUNT: count} if count else {}

    def _hint_count(self) -> int:
        if self._index_set is None:
            return 0
        return hint_count(self._index_set.size, self.index_policy.hint_share)

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        if self._index_set is None:
            return frozenset()  # the leader's phases bring the values
        return frozenset({SPARSE_KEY, HINTS_KEY} if self._hint_count() else {SPARSE_KEY})

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector | None:
        claim = reply.collective_metrics.get(TOPK_NORM2)
        if claim is not None and not claim >= 0.0:
            raise ValueError(f"topk-norm2 {claim!r} is not a non-negative number")
        if self._index_set is not None:
            self._hints_of(reply, plan)  # checked now: a bad hint refuses the reply
            return plan.compressor.decode(required_sparse(reply.sparse), self._index_set.size)
        if claim is None:
            raise ValueError("topk-norm2 None is not a non-negative number")
        return None  # values come in the value phase

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        if self._index_set is not None:
            return self._one_phase(plan, self._index_set, participants)
        return self._leader_phases(plan, participants)

    def _one_phase(
        self, plan: RoundPlan, index_set: Indices, participants: list[Participant]
    ) -> Program:
        defended = yield from combine(participants, TRAIN, index_set)
        return self._aggregate(plan, index_set, defended)

    def _aggregate(
        self,
        plan: RoundPlan,
        index_set: Indices,
        defended: Defended,
        factor: float | None = None,
    ) -> Aggregate:
        participants = defended.participants
        if defended.combined is None:
            return Aggregate([], None)
        update = Sparse(index_set, defended.combined, plan.size)
        hints = [
            (weight, indices)
            for weight, p in zip(plan.weights(participants), participants, strict=True)
            if (indices := self._hints_of(p.reply, plan)) is not None
        ]
        self._index_set = self._with_always_sent(
            self.index_policy.next_index_set(update, plan.k, hints, self.always_sent)
        )
        return Aggregate(participants, update, gain_factor=factor)

    def _with_always_sent(self, index_set: Indices | None) -> Indices | None:
        if index_set is None or not self.always_sent.size:
            return index_set
        return np.union1d(index_set, self.always_sent)

    def _hints_of(self, reply: TrainReply, plan: RoundPlan) -> Indices | None:
        """A reply's residual indices, when this round asked for them (exactly that many)."""
        count = self._hint_count()
        if not count:
            return None
        if HINTS_KEY not in reply.collective_records:
            raise ValueError(f"{HINTS_KEY} missing: {count} residual indices were asked for")
        hints = decode_indices(reply.collective_records[HINTS_KEY], plan.size)
        if hints.size != count:
            raise PayloadError(f"{HINTS_KEY}: {hints.size} indices, expected {count}")
        return hints

    def _leader_phases(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        implausible = implausible_claims(participants)
        for node, reason in implausible.items():
            plan.log.refuse(node, TRAIN, reason)
        participants = [p for p in participants if p.node_id not in implausible]
        if not participants:
            return Aggregate([], None)
        distrusted = self.caught | plan.distrusted  # a refused one picks no index set
        trusted = [p for p in participants if p.partition_id not in distrusted] or participants
        leader = self.choose_leader(plan.server_round, trusted)
        request = PhaseRequest(plan.server_round, plan.ratio).to_content()
        replies = yield from exchange(
            [Message(content=request, dst_node_id=leader.node_id, message_type=TRAIN_INDICES)],
        )
        own_indices = self._leader_indices(plan, leader, content_nbytes(request), replies)
        if own_indices is None:
            return Aggregate([], None)  # no index set, no round
        index_set = self._with_always_sent(own_indices)
        assert index_set is not None
        values_request = PhaseRequest(plan.server_round, plan.ratio, index_set, plan.size)
        content = values_request.to_content()
        replies = yield from exchange(
            [
                Message(content=content, dst_node_id=p.node_id, message_type=TRAIN_VALUES)
                for p in participants
            ],
        )
        accepted = self._values_replies(
            plan, participants, index_set, content_nbytes(content), replies, leader, own_indices
        )
        accepted = yield from screen(accepted, VALUES_ACTION, index_set)
        chosen = ~np.isin(index_set, self.always_sent)
        judges = [p for p in accepted if p.partition_id not in distrusted]
        accepted = self._judge_index_set(plan, leader, accepted, judges, chosen)
        factor = shared_index_factor(accepted, chosen) if accepted else None
        defended = yield from combine(accepted, VALUES_ACTION, index_set)
        return self._aggregate(plan, index_set, defended, factor)

    def _leader_indices(
        self, plan: RoundPlan, leader: Participant, bytes_down: int, replies: Replies
    ) -> Indices | None:
        """The leader's index set, checked (None when it gave none); logs the phase. Only the
        leader's reply (or an error standing for it) is read: one from another node is refused."""
        # The SuperLink's error reply for a node that is gone comes from Flower's own node id.
        answering = (leader.node_id, SUPERLINK_NODE_ID)
        for message in replies.messages:
            if message.metadata.src_node_id not in answering:
                reason = "an index set, but not this round's leader"
                plan.log.refuse(message.metadata.src_node_id, INDICES_ACTION, reason)
        ours = [m for m in replies.messages if m.metadata.src_node_id in answering]
        reply = ours[0] if ours else None
        index_set, bytes_up, measured = None, 0, None
        try:
            if reply is None:
                plan.log.failed.append(
                    f"node {leader.node_id} (partition {leader.partition_id}) (indices): no reply"
                )
                raise ValueError("no reply")
            if reply.has_error():
                raise ValueError(f"client error: {reply.error.reason}")
            index_set = np.sort(decode_indices(PhaseReply.sparse_of(reply.content), plan.size))
            expected = min(plan.k, plan.size - self.always_sent.size)  # the buffers go whole
            if index_set.size != expected:
                raise PayloadError(f"{index_set.size} indices, expected {expected}")
            if np.isin(index_set, self.always_sent).any():
                raise PayloadError("indices name the model's buffers, which are sent whole")
            bytes_up = content_nbytes(reply.content)
            measured = plan.measure(reply)
        except Exception as exc:  # whatever a reply holds, it costs that reply, not the run
            plan.log.refuse(leader.node_id, INDICES_ACTION, exc)
            index_set, bytes_up = None, 0
            if reply is not None and reply.metadata.src_node_id == leader.node_id:
                self.caught.add(leader.partition_id)  # its own bad answer: it leads no more
        work = ClientWork(leader.partition_id, bytes_down, 0, bytes_up, measured=measured)
        plan.log.phases.append(Phase(INDICES_ACTION, [work], replies.wall_s, bytes_down))
        return index_set

    def _values_replies(
        self,
        plan: RoundPlan,
        participants: list[Participant],
        index_set: Indices,
        bytes_down: int,
        replies: Replies,
        leader: Participant,
        leader_indices: Indices,
    ) -> list[Participant]:
        """Participants whose values at I were accepted, by partition id; logs the phase."""

        def read(p: Participant, msg: Message) -> Vector:
            values = plan.compressor.decode(PhaseReply.sparse_of(msg.content), index_set.size)
            if p is leader:  # its claim was about its own Top-k, without the buffers
                self._check_claim(leader, values[np.isin(index_set, leader_indices)])
            return values

        return phase_replies(plan, participants, VALUES_ACTION, bytes_down, replies, read)

    def _judge_index_set(
        self,
        plan: RoundPlan,
        leader: Participant,
        accepted: list[Participant],
        judges: list[Participant],
        chosen: NDArray[np.bool_],
    ) -> list[Participant]:
        """The accepted, without the leader when the ``judges`` (trusted clients) hold less
        than ``INDEX_SHARE_FLOOR`` of their Top-k energy at its index set (a set not chosen
        for the model: it then leads no more). The others' values at I are their own: they
        stay."""
        share = others_share(leader, judges, chosen)
        if share is None or share >= INDEX_SHARE_FLOOR:
            return accepted
        self.caught.add(leader.partition_id)
        if leader in accepted:  # else its values were refused already, once is enough
            plan.log.refuse(
                leader.node_id,
                VALUES_ACTION,
                f"the others hold a median {share:.3g} of their Top-k energy at its index "
                f"set, below {INDEX_SHARE_FLOOR:g}; it leads no more",
            )
        return [p for p in accepted if p is not leader]

    def _check_claim(self, leader: Participant, values: Vector) -> None:
        """The leader sent its own Top-k: the energy of its values there is what it claimed
        (up to the compressor's rounding). A leader caught lying leads no more."""
        claimed = claim_of(leader)
        sent = float(values.astype(np.float64) @ values)
        if not math.isclose(sent, claimed, rel_tol=CLAIM_TOLERANCE, abs_tol=1e-12):
            self.caught.add(leader.partition_id)
            raise ValueError(
                f"topk-norm2 claimed {claimed:g}, but its values at its own indices have "
                f"{sent:g}; it leads no more"
            )

    def star_round_s(self, outlook: Outlook) -> float:
        k = sent_count(topk_count(outlook.size, outlook.ratio), outlook.size, self.always_sent.size)
        policy = self.index_policy
        return self.predict_star_s(
            outlook.links,
            outlook.compute_s,
            k,
            outlook.size,
            outlook.values_nbytes(k),
            policy.hint_share if policy.one_phase else None,
        )

    def peer_exchange_s(
        self, topology: str, n: int, model_bytes: float, ratio: float, link: Link
    ) -> float:
        return peer_cost(self.PEER, topology, self.name)(n, model_bytes, ratio, link)

    @staticmethod
    def predict_star_s(
        links: Sequence[LinkLike],
        compute_s: Sequence[float],
        k: int,
        size: int,
        values_nbytes: int,
        hint_share: float | None = None,
    ) -> float:
        """Three phases: train (down k-sparse update, up metrics), indices (the leader: up the
        index set; the slowest client is assumed to lead), values (down the index set, up k
        values of ``values_nbytes``). With a one-phase policy (``hint_share`` not None) one:
        down the update and the index set, compute, up the values and any hinted indices."""
        ov = MESSAGE_OVERHEAD_BYTES
        idx = index_nbytes(k, size)
        if hint_share is not None:
            hints = hint_count(k, hint_share)
            up = values_nbytes + (index_nbytes(hints, size) if hints else 0) + ov
            return max(
                transfer_s(link, 4 * k + 2 * idx + ov, False) + c + transfer_s(link, up, True)
                for link, c in zip(links, compute_s, strict=True)
            )
        train = max(
            transfer_s(link, 4 * k + idx + ov, False) + c + transfer_s(link, ov, True)
            for link, c in zip(links, compute_s, strict=True)
        )
        indices = max(
            transfer_s(link, ov, False) + transfer_s(link, idx + ov, True) for link in links
        )
        values = max(
            transfer_s(link, idx + ov, False) + transfer_s(link, values_nbytes + ov, True)
            for link in links
        )
        return train + indices + values
