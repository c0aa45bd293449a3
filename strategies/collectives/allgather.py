"""Allgather-style Top-k: every client sends TopK(e), its own values and indices.

Client: e = update + residual, I = TopK indices of e, send the compressor's encoding of e[I]
with I; the residual keeps e minus what the server decodes. Server: a weighted scatter-add of
every client's sparse vector, O(N·k) work and one d-vector of memory; the union of the index
sets with their summed values is the round's update. One phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from flwr.app import ArrayRecord

from common.settings import Settings
from compress.base import ErrorFeedback, send_at
from compress.topk import sent_count, topk_with
from strategies.collectives.base import (
    OWN_TOPK_GAIN,
    ActionHandler,
    Aggregate,
    ClientPayload,
    ClientRound,
    Indices,
    Outlook,
    Participant,
    Program,
    RoundPlan,
    combine,
)
from strategies.collectives.maths import scatter_add
from timing.cost import (
    MESSAGE_OVERHEAD_BYTES,
    Link,
    LinkLike,
    PeerCost,
    allgather_topk,
    peer_cost,
    transfer_s,
)
from wire.codec import PayloadError, Sparse, index_nbytes, sparse_record, topk_count
from wire.keys import SPARSE_KEY, TRAIN
from wire.layout import Layout
from wire.phases import required_sparse
from wire.train_reply import TrainReply


class Allgather:
    name: ClassVar[str] = "allgather"
    compressed: ClassVar[bool] = True
    gain: ClassVar[str | None] = OWN_TOPK_GAIN
    own_settings: ClassVar[tuple[str, ...]] = ()
    reply_metrics: ClassVar[frozenset[str]] = frozenset()
    aligned: ClassVar[bool] = False  # each client its own Top-k
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {}

    @classmethod
    def from_settings(cls, settings: Settings, layout: Layout, always_sent: Indices) -> Allgather:
        return cls(always_sent)

    @staticmethod
    def client_train(job: ClientRound) -> ClientPayload:
        assert job.instruction.compression is not None
        size = job.update.size
        compensated = ErrorFeedback.from_state(job.state, size).compensate(
            job.update, job.error_feedback_clip, job.always_sent
        )
        k = topk_count(size, job.instruction.compression.ratio)
        indices = topk_with(compensated, k, job.always_sent)
        encoded = send_at(job.state, compensated, indices, job.compressor, job.rng)
        return ClientPayload(sparse=sparse_record(indices, size, encoded.arrays))

    PEER: ClassVar[dict[str, PeerCost]] = {"ring": allgather_topk, "tree": allgather_topk}

    def __init__(self, always_sent: Indices | None = None) -> None:
        self.always_sent = np.zeros(0, dtype=np.int64) if always_sent is None else always_sent
        # the last compressed round's union of index sets / (N·k): what the next delta carries
        self.union_fraction = 1.0

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        return frozenset({SPARSE_KEY})

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Sparse:
        record = required_sparse(reply.sparse)
        count = sent_count(plan.k, plan.size, self.always_sent.size)
        sparse = Sparse.from_record(record, plan.size, count, plan.compressor.decode)
        if self.always_sent.size and not np.isin(self.always_sent, sparse.indices).all():
            raise PayloadError("the model's buffers (sent every round) are missing")
        return sparse

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        return {}

    def round_config(self) -> dict[str, int | float]:
        return {}

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
        k = sent_count(topk_count(outlook.size, outlook.ratio), outlook.size, self.always_sent.size)
        union = min(outlook.size, math.ceil(self.union_fraction * len(outlook.links) * k))
        return self.predict_star_s(
            outlook.links, outlook.compute_s, k, union, outlook.size, outlook.values_nbytes(k)
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
        union: int,
        size: int,
        values_nbytes: int,
    ) -> float:
        """One phase: down the last union update (4u + index bytes), compute, up TopK(e)
        (``values_nbytes`` of values and the index bytes)."""
        down = 4 * union + index_nbytes(union, size) + MESSAGE_OVERHEAD_BYTES
        up = values_nbytes + index_nbytes(k, size) + MESSAGE_OVERHEAD_BYTES
        return max(
            transfer_s(link, down, False) + c + transfer_s(link, up, True)
            for link, c in zip(links, compute_s, strict=True)
        )
