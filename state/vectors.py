"""Where a client keeps a vector between messages: in its ``context.state`` (the ClientApp is a
fresh process per message, so only the state survives), or in the node's state store on disk
(state/store.py) when the server chose one. Every kept vector goes through here.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, RecordDict
from numpy.typing import NDArray

from state.store import (
    STORE_KEY,
    is_stored,
    read_stored,
    remove_stored,
    store_of,
    write_stored,
)
from wire.codec import raw_array, read_raw

Vector = NDArray[np.float32]
VECTOR = "vector"


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
