"""Allreduce's client half: the training reply, and the leader phases' ``indices`` and
``values`` requests."""

from __future__ import annotations

from flwr.app import ArrayRecord

from collectives.allreduce.names import (
    HINT_COUNT,
    HINTS_KEY,
    OWN_INDICES_KEY,
    PENDING_KEY,
    TOPK_NORM2,
)
from collectives.base import ClientAction, ClientJob, ClientPayload, Indices, Vector
from compress.error_feedback import ErrorFeedback, send_at
from compress.topk import topk_energy, topk_indices, topk_outside
from state.vectors import drop_vector, load_vector, store_vector
from wire.codec import indices_record
from wire.phases import count_in, index_set_of

NOT_HELD = "request without a compensated update from this round's training"


def train(job: ClientJob) -> ClientPayload:
    """With a shared index set (drawn from the round's seed, or sent with the instruction):
    e[I] now, and where the residual is largest when asked. Leader phases: hold e, report
    ||TopK(e)||² (the VAR score)."""
    compensated = job.compensated()
    size = compensated.size
    index_set: Indices | None
    if job.selector.draws:
        index_set = job.selector.drawn(size, job.k, job.whole, job.shared_seed)
    else:
        index_set = index_set_of(job.content, size)
    if index_set is not None:
        encoded = send_at(job.state, compensated, index_set, job.encoding, job.rng)
        records = {}
        if count := count_in(job.content, HINT_COUNT, size):
            residual = ErrorFeedback.from_state(job.state, size).residual
            records[HINTS_KEY] = indices_record(topk_indices(residual, count), size)
        return ClientPayload(sparse=ArrayRecord(encoded.arrays), records=records)
    store_vector(job.state, PENDING_KEY, compensated)
    own = topk_outside(compensated, job.k, job.whole)
    job.state[OWN_INDICES_KEY] = indices_record(own, size)
    return ClientPayload(metrics={TOPK_NORM2: topk_energy(compensated, own)})


def _held(action: ClientAction) -> Vector:
    held = load_vector(action.state, PENDING_KEY)
    if held is None:
        raise ValueError(NOT_HELD)
    return held


def indices(action: ClientAction) -> ArrayRecord:
    """The leader: the Top-k indices of its held e outside the buffers (chosen in training)."""
    if PENDING_KEY not in action.state:  # checked, not read: e itself is sent in the next phase
        raise ValueError(NOT_HELD)
    own = action.state.get(OWN_INDICES_KEY)
    if not isinstance(own, ArrayRecord):
        raise ValueError("request without Top-k indices from this round's training")
    return own


def values(action: ClientAction) -> ArrayRecord:
    """Everyone: the encoding of e[I]; the residual keeps the rest."""
    held = _held(action)
    index_set = index_set_of(action.content, held.size)
    if index_set is None:
        raise ValueError("values request without an index set")
    encoded = send_at(action.state, held, index_set, action.encoding, action.rng)
    drop_vector(action.state, PENDING_KEY)  # once sent: a failure before keeps it
    action.state.pop(OWN_INDICES_KEY, None)
    return ArrayRecord(encoded.arrays)
