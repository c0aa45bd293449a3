"""Dense: every client sends its full update in the model's layout; the server averages them
(FedAvg's maths, by the aggregation weights, accumulated in float32 in partition order). One
phase; no error feedback, no replicas: the model goes out in full every round."""

from __future__ import annotations

from collectives.base import (
    Aggregate,
    ClientJob,
    ClientPayload,
    Collective,
    DenseUpdate,
    Outlook,
    Participant,
    RoundPlan,
    Vector,
)
from collectives.program import Program, combine
from timing.cost import MESSAGE_OVERHEAD_BYTES, RING, TREE, dense_ring, dense_tree, star_phase_s
from wire.keys import ARRAYS_KEY
from wire.train_reply import TrainReply


class Dense(Collective):
    name = "dense"
    compressed = False
    aligned = True  # the whole update
    peer_costs = {RING: dense_ring, TREE: dense_tree}

    @staticmethod
    def client_train(job: ClientJob) -> ClientPayload:
        return ClientPayload(update=job.layout.unflatten(job.update))

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        return frozenset({ARRAYS_KEY})

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector:
        return plan.layout.update_of(reply.update)

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        defended = yield from combine(participants, None)
        if defended.combined is None:
            return Aggregate([], None)
        return Aggregate(defended.participants, DenseUpdate(defended.combined))

    def star_round_s(self, outlook: Outlook) -> float:
        """Down the model, compute, up the update (both 4d bytes)."""
        nbytes = 4 * outlook.size + MESSAGE_OVERHEAD_BYTES
        return star_phase_s(outlook.links, nbytes, nbytes, outlook.compute_s)
