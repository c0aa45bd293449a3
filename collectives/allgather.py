"""Allgather-style: every client sends its own selection of e, values and (when they do not come
from a seed) indices.

Client: e = update + residual, I = the selector's choice (Top-k of e, or a random-k drawn from
the client's own seed), send the encoding of e[I] with I; the residual keeps e minus what the
server decodes. Server: a weighted scatter-add of every client's sparse vector, O(N·k) work
and one d-vector of memory; the union of the index sets with their summed values is the
round's update. One phase.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord

from collectives.base import (
    NOTHING,
    OWN_TOPK_GAIN,
    Aggregate,
    ClientJob,
    ClientPayload,
    Collective,
    Indices,
    Outlook,
    Participant,
    RoundPlan,
)
from collectives.maths import scatter_add
from collectives.program import Program, combine
from common.settings import Settings
from compress import SELECTORS
from compress.base import sent_count
from compress.error_feedback import send_at
from state.fields import Fields
from timing.cost import MESSAGE_OVERHEAD_BYTES, RING, TREE, LinkLike, allgather_topk, star_phase_s
from wire.codec import INDEX_ARRAYS, PayloadError, Sparse, index_nbytes, sparse_record, topk_count
from wire.keys import TRAIN
from wire.layout import Layout
from wire.phases import required_sparse
from wire.train_reply import TrainReply


class Allgather(Collective):
    name: ClassVar[str] = "allgather"
    gain: ClassVar[str | None] = OWN_TOPK_GAIN
    peer_costs = {RING: allgather_topk, TREE: allgather_topk}

    @staticmethod
    def client_train(job: ClientJob) -> ClientPayload:
        compensated = job.compensated()
        indices = job.selector.select(compensated, job.k, job.whole, job.own_seed)
        encoded = send_at(job.state, compensated, indices, job.encoding, job.rng)
        if job.selector.draws:  # the server draws them itself
            return ClientPayload(sparse=ArrayRecord(encoded.arrays))
        return ClientPayload(sparse=sparse_record(indices, compensated.size, encoded.arrays))

    @classmethod
    def from_settings(
        cls, settings: Settings, layout: Layout, whole: Indices, step_is_aggregate: bool = True
    ) -> Self:
        return cls(whole, indices_travel=not SELECTORS[settings.compression.selector].draws)

    def __init__(self, whole: Indices = NOTHING, indices_travel: bool = True) -> None:
        self.whole = whole
        self.indices_travel = indices_travel  # else the server draws them
        # the last compressed round's union of index sets / (N·k): what the next delta carries
        self.union_fraction = 1.0

    def state_dict(self) -> dict[str, object]:
        return {"schema": self.STATE_SCHEMA, "union_fraction": self.union_fraction}

    def load_state_dict(self, state: object) -> None:
        fields = Fields(f"collective {self.name}", state, self.STATE_SCHEMA)
        self.union_fraction = fields.number("union_fraction", least=0.0)
        fields.done()

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Sparse:
        record = required_sparse(reply.sparse)
        if plan.selector.draws:
            if INDEX_ARRAYS & set(record):
                raise PayloadError("indices sent, but the server draws this client's itself")
            seed = plan.seed_of(reply.partition_id)
            drawn = plan.selector.drawn(plan.size, plan.k, self.whole, seed)
            return Sparse(drawn, plan.encoding.decode(record, drawn.size), plan.size)
        count = sent_count(plan.k, plan.size, self.whole.size)
        sparse = Sparse.from_record(record, plan.size, count, plan.encoding.decode)
        if self.whole.size and not np.isin(self.whole, sparse.indices).all():
            raise PayloadError("the model's buffers (sent every round) are missing")
        return sparse

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        defended = yield from combine(participants, TRAIN)
        participants = defended.participants
        if not participants:
            return Aggregate([], None)
        union, values = scatter_add(
            [p.contribution.indices for p in participants],  # type: ignore[union-attr]
            defended.values,
            plan.weights(participants),
            plan.size,
        )
        if plan.ratio < 1.0:  # a dense round says nothing about overlap
            self.union_fraction = union.size / (len(participants) * plan.k)
        return Aggregate(participants, Sparse(union, values, plan.size))

    def star_round_s(self, outlook: Outlook) -> float:
        k = sent_count(topk_count(outlook.size, outlook.ratio), outlook.size, self.whole.size)
        union = min(outlook.size, math.ceil(self.union_fraction * len(outlook.links) * k))
        return self.predict_star_s(
            outlook.links,
            outlook.compute_s,
            k,
            union,
            outlook.size,
            outlook.values_nbytes(k),
            self.indices_travel,
        )

    @staticmethod
    def predict_star_s(
        links: Sequence[LinkLike],
        compute_s: Sequence[float],
        k: int,
        union: int,
        size: int,
        values_nbytes: int,
        indices_travel: bool = True,
    ) -> float:
        """One phase: down the last union update (4u + index bytes), compute, up the selection
        (``values_nbytes`` of values, and the index bytes unless the server draws them)."""
        down = 4 * union + index_nbytes(union, size) + MESSAGE_OVERHEAD_BYTES
        up = values_nbytes + (index_nbytes(k, size) if indices_travel else 0)
        return star_phase_s(links, down, up + MESSAGE_OVERHEAD_BYTES, compute_s)
