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

from strategies.collectives.base import (
    ActionHandler,
    Aggregate,
    ClientPayload,
    ClientRound,
    DenseUpdate,
    Indices,
    Participant,
    Program,
    RoundPlan,
    Vector,
    finished,
    screened,
)
from wire.keys import ARRAYS_KEY
from wire.messages import TrainReply


class Dense:
    name: ClassVar[str] = "dense"
    compressed: ClassVar[bool] = False
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {}

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

    def round_index_set(self) -> Indices | None:
        return None

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        return {}

    def round_hint_count(self) -> int:
        return 0

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        participants = screened(plan, participants, None)
        if not participants:
            return finished(Aggregate([], None))
        updates = [p.contribution for p in participants]
        combined = plan.defence.combine(updates, plan.weights(participants))  # type: ignore[arg-type]
        return finished(Aggregate(participants, DenseUpdate(combined)))
