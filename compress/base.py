"""The Compressor protocol and error feedback, generic over compressors.

A compressor turns the values a client sends (its Top-k entries, or its entries at a shared
index set) into the arrays that travel, and says what the receiver will decode from them.
Error feedback then keeps, for the next round, everything that did not arrive:

    e = update + residual            (compensate)
    sent = decode(encode(e[I]))      (what the receiver will see at the indices I)
    residual = e - sent at I, e elsewhere

so a lossy compressor's error (quantisation, say) is fed back like the entries left out.
The residual lives in the node's ``context.state``: the ClientApp is a fresh process per message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from numpy.typing import NDArray

from compress.state_store import (
    STORE_KEY,
    is_stored,
    read_stored,
    remove_stored,
    store_of,
    write_stored,
)
from wire.codec import raw_array, read_raw

Vector = NDArray[np.float32]
Indices = NDArray[np.int64]

RESIDUAL_KEY = "ef-residual"
VECTOR = "vector"


@dataclass(frozen=True)
class Encoded:
    arrays: dict[str, Array]  # what travels (beside the indices, which the codec encodes)
    decoded: Vector  # the values the receiver will decode from ``arrays``


class Compressor(Protocol):
    """How the values a client sends travel: ``encode`` on the client, ``decode`` at the
    server (which raises ``PayloadError`` naming what is wrong)."""

    name: ClassVar[str]

    def encode(self, values: Vector, rng: np.random.Generator) -> Encoded: ...

    def decode(self, record: ArrayRecord, count: int) -> Vector: ...

    def values_nbytes(self, count: int) -> int:
        """Bytes of ``count`` encoded values (for the cost models)."""
        ...


def load_vector(state: RecordDict, key: str) -> Vector | None:
    """A float32 vector kept in ``state`` or in the node's state store (a writable copy), or
    None."""
    if key not in state:
        return None
    record = state[key]
    if is_stored(record):
        return read_stored(state, key)
    assert isinstance(record, ArrayRecord)
    return read_raw(record, VECTOR, "float32").astype(np.float32)


def _in_record(vector: Vector) -> ArrayRecord:
    return ArrayRecord({VECTOR: raw_array(vector.astype(np.float32))})


def store_vector(state: RecordDict, key: str, vector: Vector) -> None:
    """Keep ``vector`` in ``state``, or in the node's state store when it uses one."""
    directory = store_of(state)
    state[key] = _in_record(vector) if directory is None else write_stored(directory, key, vector)


def drop_vector(state: RecordDict, key: str) -> None:
    """Forget ``key``'s vector, and its file when it is in the store."""
    record = state.get(key)
    if record is not None and is_stored(record):
        remove_stored(state, key)
    state.pop(key, None)


def vectors_into_store(state: RecordDict) -> None:
    """Move every vector ``state`` holds itself into the node's store (a restored state's)."""
    if store_of(state) is None:
        return
    for key, record in list(state.items()):
        if isinstance(record, ArrayRecord) and list(record) == [VECTOR]:
            store_vector(state, key, read_raw(record, VECTOR, "float32").astype(np.float32))


def vectors_in_memory(state: RecordDict) -> RecordDict:
    """``state`` with every stored vector read back into its record and no store: what a
    checkpoint keeps (a file that names no other)."""
    held = RecordDict()
    for key, record in state.items():
        if key != STORE_KEY:
            held[key] = _in_record(read_stored(state, key)) if is_stored(record) else record
    return held


class ErrorFeedback:
    """Residual memory of one client: what was computed but has not arrived yet."""

    def __init__(self, residual: Vector) -> None:
        self.residual = residual

    @classmethod
    def from_state(cls, state: RecordDict, size: int) -> ErrorFeedback:
        residual = load_vector(state, RESIDUAL_KEY)
        if residual is None:
            residual = np.zeros(size, dtype=np.float32)  # nothing held back yet
        if residual.shape != (size,):
            raise ValueError(f"stored residual has {residual.size} entries, the model {size}")
        return cls(residual)

    def compensate(
        self, update: Vector, clip: float = 0.0, exempt: Indices | None = None
    ) -> Vector:
        """e = update + residual. With ``clip`` > 0, e is scaled so that its norm is at most
        clip x the update's (both outside ``exempt``, the entries sent whole, which keep
        their value): a residual grown large is released gradually and its excess dropped."""
        compensated = update + self.residual
        if clip <= 0.0:
            return compensated
        scaled = np.ones(update.size, dtype=bool)
        if exempt is not None and exempt.size:
            scaled[exempt] = False
        bound = clip * float(np.linalg.norm(update[scaled].astype(np.float64)))
        norm = float(np.linalg.norm(compensated[scaled].astype(np.float64)))
        if norm > bound:
            compensated[scaled] *= np.float32(bound / norm)
        return compensated

    def keep(self, compensated: Vector, indices: Indices, decoded: Vector) -> None:
        """residual = e − what the receiver decodes (``decoded`` at ``indices``, 0 elsewhere)."""
        residual = compensated.copy()
        residual[indices] = compensated[indices] - decoded
        self.residual = residual

    def to_state(self, state: RecordDict) -> None:
        store_vector(state, RESIDUAL_KEY, self.residual)


def send_at(
    state: RecordDict,
    compensated: Vector,
    indices: Indices,
    compressor: Compressor,
    rng: np.random.Generator,
) -> Encoded:
    """Encode e at ``indices`` and keep the rest (and the encoding's error) as the residual."""
    encoded = compressor.encode(compensated[indices], rng)
    memory = ErrorFeedback(compensated)
    memory.keep(compensated, indices, encoded.decoded)
    memory.to_state(state)
    return encoded
