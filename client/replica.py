"""The client's replica of the global model, kept with its version in ``context.state``.

The server sends the full model, the last aggregated update (a delta from the previous
version), the model's values wherever it changed since an older version (a patch, after rounds
sat out) or nothing (the replica is current); the replica stays bit-for-bit equal to the
server's model.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

from compress.base import Vector
from compress.low_rank import Factored
from state.vectors import load_vector, store_vector
from wire.keys import FULL, MODEL_VERSION
from wire.train_instruction import ReplicaPayload

REPLICA_KEY = "replica"
REPLICA_META_KEY = "replica-meta"


def bring_up_to_date(state: RecordDict, payload: ReplicaPayload) -> Vector:
    """Bring the replica to the version the server names; return the model to train from."""
    if payload.kind == FULL:
        assert payload.full is not None
        model = payload.full
    else:
        held = load_vector(state, REPLICA_KEY)
        held_version = None
        if REPLICA_META_KEY in state:
            meta = state[REPLICA_META_KEY]
            assert isinstance(meta, ConfigRecord)
            held_version = int(meta[MODEL_VERSION])  # type: ignore[arg-type]
        expected = payload.base_version
        if held is None or held_version != expected:
            raise ValueError(
                f"replica is at version {held_version}, the server assumed {expected}: "
                "send the full model"
            )
        model = held
        delta = payload.delta
        if payload.compact is not None:
            delta = Factored.from_record(payload.compact, model.size).to_sparse()
        if delta is not None:
            model[delta.indices] += delta.values
        if payload.patch is not None:
            model[payload.patch.indices] = payload.patch.values
    store_vector(state, REPLICA_KEY, model)
    state[REPLICA_META_KEY] = ConfigRecord({MODEL_VERSION: payload.version})
    return model
