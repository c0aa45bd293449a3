"""A collective written in a test: one module (this one's ``EncodedDense``) and one table line,
and settings, ``collective = auto`` and the replicas take it as they take the shipped ones.

``EncodedDense`` subclasses none of them: every client sends its whole compensated update in
the run's encoding (QSGD levels, say), the values of all clients sit at the same coordinates,
the server combines them. It writes only what differs from the base's defaults: its name,
alignment, the client half (error feedback's two halves from the base and the compress
package), the decoding, the program and its cost.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord

from collectives import COLLECTIVES
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
from compress.error_feedback import send_at
from tests.helpers import federation_settings, run_in_process
from timing.cost import MESSAGE_OVERHEAD_BYTES, star_phase_s
from wire.codec import Sparse
from wire.keys import TRAIN
from wire.phases import required_sparse
from wire.train_reply import TrainReply


class EncodedDense(Collective):
    name = "encoded-dense"
    aligned = True

    @staticmethod
    def client_train(job: ClientJob) -> ClientPayload:
        compensated = job.compensated()
        every = np.arange(compensated.size, dtype=np.int64)
        encoded = send_at(job.state, compensated, every, job.encoding, job.rng)
        return ClientPayload(sparse=ArrayRecord(encoded.arrays))

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector:
        return plan.encoding.decode(required_sparse(reply.sparse), plan.size)

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        defended = yield from combine(participants, TRAIN)
        if defended.combined is None:
            return Aggregate([], None)
        every = np.arange(plan.size, dtype=np.int64)
        return Aggregate(defended.participants, Sparse(every, defended.combined, plan.size))

    def star_round_s(self, outlook: Outlook) -> float:
        """Down the last update (all d values), compute, up d encoded values: nothing else."""
        down = 4 * outlook.size + MESSAGE_OVERHEAD_BYTES
        up = outlook.values_nbytes(outlook.size) + MESSAGE_OVERHEAD_BYTES
        return star_phase_s(outlook.links, down, up, outlook.compute_s) / 100  # say, cheap


class DenseSteps(EncodedDense):
    """The same exchange with its aggregate as a DenseUpdate: outside the replica contract."""

    name = "dense-steps"

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        aggregate = yield from super().program(plan, participants)
        update = aggregate.update
        assert isinstance(update, Sparse)
        return Aggregate(aggregate.participants, DenseUpdate(update.dense()))


@pytest.fixture
def in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    for collective in (EncodedDense, DenseSteps):
        monkeypatch.setitem(COLLECTIVES, collective.name, collective)  # its one table line


@pytest.mark.usefixtures("task_identity", "in_the_table")
def test_settings_and_auto_take_a_collective_written_in_a_test() -> None:
    settings = federation_settings(
        collective="auto",
        auto_collectives=f"allgather,{EncodedDense.name}",
        encoding="qsgd",
        qsgd_levels=15,
        robust="none",
    )
    final, _, _, rounds = run_in_process(settings, rounds=5)
    chosen = [rounds[r].collective for r in range(1, 6)]
    assert chosen == ["allgather", *[EncodedDense.name] * 4]  # tried once each, then cheaper
    assert rounds[5].predicted is not None and EncodedDense.name in rounds[5].predicted
    assert not any(rounds[r].refused for r in rounds) and np.isfinite(final).all()
    assert rounds[5].train_loss < rounds[1].train_loss  # it trains


@pytest.mark.usefixtures("task_identity", "in_the_table")
@pytest.mark.parametrize(("collective", "payload"), [(EncodedDense, "delta"), (DenseSteps, "full")])
def test_replicas_follow_a_sparse_aggregate_and_fall_back_to_full_models_otherwise(
    collective: type[Collective], payload: str
) -> None:
    """The replica contract (collectives/base.py): a Sparse aggregate goes down as a
    delta; a DenseUpdate leaves the replicas behind, and the next round sends full models."""
    settings = federation_settings(collective=collective.name, robust="none")
    _, _, _, rounds = run_in_process(settings, rounds=3)
    assert rounds[1].model_payloads == {"full": 3}  # nobody holds a replica yet
    assert rounds[3].model_payloads == {payload: 3}
