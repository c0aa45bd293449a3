"""Allreduce-compatible Top-k: every client sends values at one shared index set I.

Uplinks carry values only, so the values can be summed as an allreduce would. Where I comes
from: a selector that draws (random-k) draws it from the round's shared seed, one phase with
nothing of I on the wire; for Top-k, the index policy (index_policies.py):
- ``leader`` (the papers'): three phases. ``train``: every client trains, holds
  e = update + residual in its state and reports ||TopK(e)||²; ``indices``: the leader
  (leaders.py: STAR, by position; VAR, by the largest claim) sends the Top-k indices of its e;
  ``values``: I goes to everyone, each sends e[I] and keeps the rest.
- one phase (in neither paper): I travels with the instructions, so clients send e[I] at once
  (the first round uses the leader phases).
A model's buffers are in every I (``ClientJob.whole``) and never take one of its k slots. A
leader is judged twice (leaders.py): its values at its own indices must have the energy it
claimed (when the encoding keeps energy), and the others must hold some of their Top-k energy
at its index set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord, Message
from flwr.common.constant import SUPERLINK_NODE_ID
from numpy.typing import NDArray

from collectives.allreduce import client
from collectives.allreduce.index_policies import (
    INDEX_POLICIES,
    LEADER_EACH_ROUND,
    hint_count,
)
from collectives.allreduce.leaders import (
    CLAIM_TOLERANCE,
    INDEX_SHARE_FLOOR,
    LEADERS,
    STAR,
    VAR,
    claim_of,
    implausible_claims,
    others_share,
    shared_index_factor,
)
from collectives.allreduce.names import (
    HINT_COUNT,
    HINTS_KEY,
    INDICES_ACTION,
    OWN_INDICES_KEY,
    PENDING_KEY,
    TOPK_NORM2,
    TRAIN_INDICES,
    TRAIN_VALUES,
    VALUES_ACTION,
)
from collectives.base import (
    ARRAYS,
    NOTHING,
    SHARED_INDEX_GAIN,
    VECTOR_ENTRY,
    ActionHandler,
    Aggregate,
    ClientJob,
    ClientPayload,
    Collective,
    Indices,
    Outlook,
    Participant,
    RoundPlan,
    Vector,
)
from collectives.program import (
    Defended,
    Phase,
    Program,
    Replies,
    combine,
    exchange,
    phase_replies,
    screen,
)
from common.settings import Settings
from compress import ENCODINGS, SELECTORS
from compress.base import sent_count
from state.fields import Fields
from timing.cost import (
    MESSAGE_OVERHEAD_BYTES,
    RING,
    TREE,
    LinkLike,
    artopk_ring,
    artopk_tree,
    star_phase_s,
)
from wire.codec import (
    PayloadError,
    Sparse,
    decode_indices,
    index_nbytes,
    indices_record,
    topk_count,
)
from wire.keys import INDEX_SET_KEY, SPARSE_KEY, TRAIN
from wire.layout import Layout
from wire.nbytes import content_nbytes
from wire.phases import PhaseReply, PhaseRequest, required_sparse
from wire.tally import ClientWork
from wire.train_reply import TrainReply


class Allreduce(Collective):
    name: ClassVar[str] = "allreduce"
    gain: ClassVar[str | None] = SHARED_INDEX_GAIN
    own_settings: ClassVar[tuple[str, ...]] = ("index-policy", "leader", "index-hints")
    reply_metrics: ClassVar[frozenset[str]] = frozenset({TOPK_NORM2})
    aligned: ClassVar[bool] = True  # the shared index set
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {
        INDICES_ACTION: client.indices,
        VALUES_ACTION: client.values,
    }
    peer_costs = {RING: artopk_ring, TREE: artopk_tree}
    client_state = {PENDING_KEY: VECTOR_ENTRY, OWN_INDICES_KEY: ARRAYS}

    @staticmethod
    def client_train(job: ClientJob) -> ClientPayload:
        return client.train(job)

    @classmethod
    def check(cls, settings: Settings) -> list[str]:
        errors = []
        selector, chosen = SELECTORS[settings.compression.selector], settings.collective
        if selector.draws and (chosen.index_policy, chosen.leader) != (LEADER_EACH_ROUND, STAR):
            errors.append(
                f"index-policy and leader find a shared Top-k index set; selector = "
                f"{selector.name!r} draws it from the round's seed (leave them at "
                f"{LEADER_EACH_ROUND!r} and {STAR!r})"
            )
        encoding = ENCODINGS[settings.compression.encoding]
        if chosen.leader == VAR and not encoding.keeps_energy:
            errors.append(
                f"leader = {VAR!r} leads by the Top-k energy clients claim, which the server "
                f"checks against the values they send; encoding = {encoding.name!r} does not "
                "keep their energy (use leader = 'star')"
            )
        return errors

    @classmethod
    def from_settings(
        cls, settings: Settings, layout: Layout, whole: Indices, step_is_aggregate: bool = True
    ) -> Self:
        chosen = settings.collective
        return cls(
            layout.size,
            chosen.leader,
            chosen.index_policy,
            chosen.index_hints,
            whole,
            index_set_drawn=SELECTORS[settings.compression.selector].draws,
        )

    def __init__(
        self,
        size: int,  # the model's length, for the index set's encoding
        leader: str = STAR,
        index_policy: str = LEADER_EACH_ROUND,
        index_hints: float = 0.0,
        whole: Indices = NOTHING,
        index_set_drawn: bool = False,
    ) -> None:
        self.size = size
        self.whole = whole  # the entries sent whole: in every index set (ClientJob.whole)
        self.choose_leader = LEADERS[leader]
        self.index_policy = INDEX_POLICIES[index_policy](index_hints)
        # every round's index set drawn from its shared seed (a selector that draws): one
        # phase, nothing of it on the wire
        self.index_set_drawn = index_set_drawn
        # one-phase policies: the index set sent with a round's instructions, kept until the
        # round's aggregate chooses the next one
        self._index_set: Indices | None = None
        self.caught: set[int] = set()  # partitions whose norm claim their values contradicted

    def state_dict(self) -> dict[str, object]:
        """The index set the next round's instructions carry (one-phase policies), the
        partitions caught lying, and what the index policy learnt."""
        return {
            "schema": self.STATE_SCHEMA,
            "index_set": self._index_set,
            "caught": sorted(self.caught),
            "index_policy": self.index_policy.state_dict(),
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields(f"collective {self.name}", state, self.STATE_SCHEMA)
        self._index_set = fields.optional_indices("index_set", self.size)
        self.caught = set(fields.integers("caught"))
        self.index_policy.load_state_dict(fields.raw("index_policy"), self.size)
        fields.done()

    def _round_index_set(self, plan: RoundPlan) -> Indices | None:
        """This round's shared index set when it is known before training (None: a leader's)."""
        if self.index_set_drawn:
            return plan.selector.drawn(plan.size, plan.k, self.whole, plan.seed_of())
        return self._index_set

    def _round_set_size(self, plan: RoundPlan) -> int | None:
        """The size of ``_round_index_set``, without drawing it again for every reply."""
        if self.index_set_drawn:
            return sent_count(plan.k, plan.size, self.whole.size)
        return None if self._index_set is None else self._index_set.size

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
        if self.index_set_drawn:
            return frozenset({SPARSE_KEY})
        if self._index_set is None:
            return frozenset()  # the leader's phases bring the values
        return frozenset({SPARSE_KEY, HINTS_KEY} if self._hint_count() else {SPARSE_KEY})

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector | None:
        claim = reply.collective_metrics.get(TOPK_NORM2)
        if claim is not None and not claim >= 0.0:
            raise ValueError(f"topk-norm2 {claim!r} is not a non-negative number")
        count = self._round_set_size(plan)
        if count is not None:
            self._hints_of(reply, plan)  # checked now: a bad hint refuses the reply
            return plan.encoding.decode(required_sparse(reply.sparse), count)
        if claim is None:
            raise ValueError("topk-norm2 None is not a non-negative number")
        return None  # values come in the value phase

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        index_set = self._round_index_set(plan)
        if index_set is not None:
            return self._one_phase(plan, index_set, participants)
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
        self._index_set = self._with_whole(
            self.index_policy.next_index_set(update, plan.k, hints, self.whole)
        )
        return Aggregate(participants, update, gain_factor=factor)

    def _with_whole(self, index_set: Indices | None) -> Indices | None:
        if index_set is None or not self.whole.size:
            return index_set
        return np.union1d(index_set, self.whole)

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
        index_set = self._with_whole(own_indices)
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
        chosen = ~np.isin(index_set, self.whole)
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
            expected = min(plan.k, plan.size - self.whole.size)  # the buffers go whole
            if index_set.size != expected:
                raise PayloadError(f"{index_set.size} indices, expected {expected}")
            if np.isin(index_set, self.whole).any():
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
            values = plan.encoding.decode(PhaseReply.sparse_of(msg.content), index_set.size)
            if p is leader and plan.encoding.keeps_energy:  # its claim: its own Top-k
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
        (up to the encoding's rounding). A leader caught lying leads no more."""
        claimed = claim_of(leader)
        sent = float(values.astype(np.float64) @ values)
        if not math.isclose(sent, claimed, rel_tol=CLAIM_TOLERANCE, abs_tol=1e-12):
            self.caught.add(leader.partition_id)
            raise ValueError(
                f"topk-norm2 claimed {claimed:g}, but its values at its own indices have "
                f"{sent:g}; it leads no more"
            )

    def star_round_s(self, outlook: Outlook) -> float:
        k = sent_count(topk_count(outlook.size, outlook.ratio), outlook.size, self.whole.size)
        policy = self.index_policy
        one_phase = policy.one_phase or self.index_set_drawn
        return self.predict_star_s(
            outlook.links,
            outlook.compute_s,
            k,
            outlook.size,
            outlook.values_nbytes(k),
            policy.hint_share if one_phase else None,
            index_set_travels=not self.index_set_drawn,
        )

    @staticmethod
    def predict_star_s(
        links: Sequence[LinkLike],
        compute_s: Sequence[float],
        k: int,
        size: int,
        values_nbytes: int,
        hint_share: float | None = None,
        index_set_travels: bool = True,
    ) -> float:
        """Three phases: train (down k-sparse update, up metrics), indices (the leader: up the
        index set; the slowest client is assumed to lead), values (down the index set, up k
        values of ``values_nbytes``). One phase (``hint_share`` not None): down the update and
        the index set (unless drawn), compute, up the values and any hinted indices."""
        ov = MESSAGE_OVERHEAD_BYTES
        idx = index_nbytes(k, size)
        if hint_share is not None:
            hints = hint_count(k, hint_share)
            up = values_nbytes + (index_nbytes(hints, size) if hints else 0) + ov
            down = 4 * k + (2 * idx if index_set_travels else idx) + ov
            return star_phase_s(links, down, up, compute_s)
        train = star_phase_s(links, 4 * k + idx + ov, ov, compute_s)
        indices = star_phase_s(links, ov, idx + ov)
        values = star_phase_s(links, idx + ov, values_nbytes + ov)
        return train + indices + values
