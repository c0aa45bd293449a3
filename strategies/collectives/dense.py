"""Dense: every client sends its full update in the model's layout; the server averages them.

Synchronous distributed SGD, FedAvg's maths (weighted by the aggregation weights, accumulated in
float32 in partition order). One phase; no error feedback, no replicas: the model goes out in
full every round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from flwr.app import ArrayRecord

from common.settings import Settings
from strategies.collectives.base import (
    ActionHandler,
    Aggregate,
    ClientPayload,
    ClientRound,
    DenseUpdate,
    Indices,
    Outlook,
    Participant,
    Program,
    RoundPlan,
    Vector,
    combine,
)
from timing.cost import (
    MESSAGE_OVERHEAD_BYTES,
    Link,
    PeerCost,
    peer_cost,
    ring_allreduce,
    transfer_s,
    tree_allreduce,
)
from wire.keys import ARRAYS_KEY
from wire.layout import Layout
from wire.train_reply import TrainReply


class Dense:
    name: ClassVar[str] = "dense"
    compressed: ClassVar[bool] = False
    gain: ClassVar[str | None] = None
    own_settings: ClassVar[tuple[str, ...]] = ()
    reply_metrics: ClassVar[frozenset[str]] = frozenset()
    aligned: ClassVar[bool] = True  # the whole update
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {}
    PEER: ClassVar[dict[str, PeerCost]] = {
        "ring": lambda n, m, c, link: ring_allreduce(n, m, link),
        "tree": lambda n, m, c, link: tree_allreduce(n, m, link),
    }

    @classmethod
    def from_settings(cls, settings: Settings, layout: Layout, always_sent: Indices) -> Dense:
        return cls()

    @staticmethod
    def client_train(job: ClientRound) -> ClientPayload:
        return ClientPayload(update=job.layout.unflatten(job.update))

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        return frozenset({ARRAYS_KEY})

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector:
        if reply.update is None:
            raise ValueError(f"missing ArrayRecord {ARRAYS_KEY!r}")
        for name, array in reply.update.items():
            if array.dtype != "float32":
                raise ValueError(f"array {name!r} has dtype {array.dtype}, expected float32")
        update = plan.layout.flatten(reply.update)
        if not np.all(np.isfinite(update)):
            raise ValueError("update contains NaN or infinite values")
        return update

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        return {}

    def round_config(self) -> dict[str, int | float]:
        return {}

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        defended = yield from combine(participants, None)
        if defended.combined is None:
            return Aggregate([], None)
        return Aggregate(defended.participants, DenseUpdate(defended.combined))

    def star_round_s(self, outlook: Outlook) -> float:
        """Down the model, compute, up the update (both 4d bytes)."""
        nbytes = 4 * outlook.size + MESSAGE_OVERHEAD_BYTES
        return max(
            transfer_s(link, nbytes, False) + c + transfer_s(link, nbytes, True)
            for link, c in zip(outlook.links, outlook.compute_s, strict=True)
        )

    def peer_exchange_s(
        self, topology: str, n: int, model_bytes: float, ratio: float, link: Link
    ) -> float:
        return peer_cost(self.PEER, topology, self.name)(n, model_bytes, ratio, link)
