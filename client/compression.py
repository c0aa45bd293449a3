"""The client half of Top-k compression, with its state kept in ``context.state``.

Per round: compensate (e = update + residual) → compress (Top-k, or the values at a given
index set) → update the residual (r = e − sent; zeros at the start) → reply. Between the phases
of an Allreduce round the compensated vector waits in the state. The client also keeps a
replica of the global model and its version, so the server can send only the last update.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from numpy.typing import NDArray

from compress.topk import topk_energy, topk_indices
from wire.codec import VALUES, Sparse, decode_indices, raw_array, read_raw, topk_count

RESIDUAL_KEY = "ef-residual"
PENDING_KEY = "ef-pending"
REPLICA_KEY = "replica"
REPLICA_META_KEY = "replica-meta"
VECTOR = "vector"


def load_vector(state: RecordDict, key: str) -> NDArray[np.float32] | None:
    if key not in state:
        return None
    record = state[key]
    assert isinstance(record, ArrayRecord)
    return read_raw(record, VECTOR, "float32").astype(np.float32)  # a writable copy


def _store(state: RecordDict, key: str, vector: NDArray[np.float32]) -> None:
    state[key] = ArrayRecord({VECTOR: raw_array(vector.astype(np.float32))})


class ErrorFeedback:
    """Residual memory of one client: what was computed but not yet sent."""

    def __init__(self, residual: NDArray[np.float32]) -> None:
        self.residual = residual

    @classmethod
    def from_state(cls, state: RecordDict, size: int) -> ErrorFeedback:
        residual = load_vector(state, RESIDUAL_KEY)
        if residual is None:
            residual = np.zeros(size, dtype=np.float32)
        if residual.shape != (size,):
            raise ValueError(f"stored residual has {residual.size} entries, the model {size}")
        return cls(residual)

    def compensate(self, update: NDArray[np.float32]) -> NDArray[np.float32]:
        return update + self.residual

    def update(self, compensated: NDArray[np.float32], sent_indices: NDArray[np.int64]) -> None:
        """r = e − sent, where sent = e at ``sent_indices`` and zero elsewhere."""
        residual = compensated.copy()
        residual[sent_indices] = 0.0
        self.residual = residual

    def to_state(self, state: RecordDict) -> None:
        _store(state, RESIDUAL_KEY, self.residual)


def compress_topk(
    state: RecordDict, update: NDArray[np.float32], k: int
) -> tuple[Sparse, NDArray[np.float32]]:
    """Allgather step: send TopK(e); returns the payload and the compensated vector."""
    memory = ErrorFeedback.from_state(state, update.size)
    compensated = memory.compensate(update)
    indices = topk_indices(compensated, k)
    memory.update(compensated, indices)
    memory.to_state(state)
    return Sparse(indices, compensated[indices], update.size), compensated


def hold_compensated(state: RecordDict, update: NDArray[np.float32], k: int) -> float:
    """Allreduce phase 1: keep e for the next phases; return ||TopK(e)||² (the VAR score)."""
    memory = ErrorFeedback.from_state(state, update.size)
    compensated = memory.compensate(update)
    _store(state, PENDING_KEY, compensated)
    return topk_energy(compensated, topk_indices(compensated, k))


def pending_topk(state: RecordDict, ratio: float) -> tuple[NDArray[np.int64], int]:
    """Allreduce index phase (leader only): Top-k indices of the held e, and its length."""
    compensated = load_vector(state, PENDING_KEY)
    if compensated is None:
        raise ValueError("index request without a compensated update from this round's training")
    return topk_indices(compensated, topk_count(compensated.size, ratio)), int(compensated.size)


def send_values_at(
    state: RecordDict, index_set: ArrayRecord, update: NDArray[np.float32] | None = None
) -> NDArray[np.float32]:
    """Values at the shared indices: e[I]; the residual keeps everything else.

    With ``update`` the compensated vector is formed now (global index policy, one phase);
    otherwise it is the one held since this round's training phase.
    """
    if update is not None:
        compensated = update + ErrorFeedback.from_state(state, update.size).residual
    else:
        held = load_vector(state, PENDING_KEY)
        if held is None:
            raise ValueError("values request without a compensated update from this round")
        compensated = held
        del state[PENDING_KEY]
    indices = decode_indices(index_set, compensated.size)
    memory = ErrorFeedback(compensated)
    memory.update(compensated, indices)
    memory.to_state(state)
    return compensated[indices]


@dataclass(frozen=True)
class ModelInstruction:
    payload: str  # "full", "delta" or "current"
    version: int  # version the replica is at after applying
    base_version: int  # for "delta": version it must be at before


def apply_model(
    state: RecordDict, content: RecordDict, config: ConfigRecord
) -> NDArray[np.float32]:
    """Bring the replica to the version the server names; return the model to train from."""
    instruction = ModelInstruction(
        payload=str(config["payload"]),
        version=int(config["model-version"]),  # type: ignore[arg-type]
        base_version=int(config.get("base-version", -1)),  # type: ignore[arg-type]
    )
    held = load_vector(state, REPLICA_KEY)
    held_version = None
    if REPLICA_META_KEY in state:
        meta = state[REPLICA_META_KEY]
        assert isinstance(meta, ConfigRecord)
        held_version = int(meta["version"])  # type: ignore[arg-type]
    if instruction.payload == "full":
        record = content.array_records["model"]
        model = read_raw(record, VALUES, "float32").astype(np.float32)
    elif instruction.payload in ("delta", "current"):
        expected = (
            instruction.base_version if instruction.payload == "delta" else instruction.version
        )
        if held is None or held_version != expected:
            raise ValueError(
                f"replica is at version {held_version}, the server assumed {expected}: "
                "send the full model"
            )
        model = held
        if instruction.payload == "delta":
            delta = Sparse.from_record(content.array_records["delta"], held.size)
            model[delta.indices] += delta.values
    else:
        raise ValueError(f"unknown model payload {instruction.payload!r}")
    _store(state, REPLICA_KEY, model)
    state[REPLICA_META_KEY] = ConfigRecord({"version": instruction.version})
    return model
