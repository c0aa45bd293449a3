"""A client's ``context.state`` as a declared part: the entries a client keeps between messages
(error-feedback residual, replica, stream buffer and clocks, adaptive share, a collective's
values held between its phases, the cached partition), each of a known kind, written in the one
state file format (state/archive.py) and checked entry by entry when read back.

Kinds: a ``vector`` (one float32 vector), ``arrays`` (named arrays, as Flower's ArrayRecord
holds them) or ``config`` (numbers and strings, a ConfigRecord). The entries come from the
modules that write them (``KEPT``) and from each collective (``Collective.client_state``).
Used by a simulated client's saved state at a checkpoint (client/saved_state.py) and by a
device's agent (client/device_state.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from client.buffer import BUFFER_STATE_KEY
from client.node import LOCAL_DATA_KEY
from client.replica import REPLICA_KEY, REPLICA_META_KEY
from client.reports import ADAPTIVE_STATE_KEY
from client.streams import STREAM_STATE_KEY, WALL_CLOCK_STATE_KEY
from collectives import COLLECTIVES
from collectives.base import ARRAYS, CONFIG, VECTOR_ENTRY
from compress.error_feedback import RESIDUAL_KEY
from state.archive import StateError, read_archive, write_archive
from state.fields import Fields
from state.vectors import VECTOR
from wire.codec import raw_array, read_npy, read_raw
from wire.fields import is_number
from wire.keys import RAW_STYPE

SCHEMA = 1
PART = "client state"
# what the client's own modules keep (a collective declares its own: Collective.client_state)
KEPT = {
    RESIDUAL_KEY: VECTOR_ENTRY,
    REPLICA_KEY: VECTOR_ENTRY,
    REPLICA_META_KEY: CONFIG,
    BUFFER_STATE_KEY: ARRAYS,
    STREAM_STATE_KEY: CONFIG,
    WALL_CLOCK_STATE_KEY: CONFIG,
    ADAPTIVE_STATE_KEY: CONFIG,
    LOCAL_DATA_KEY: ARRAYS,
}


def kept_entries() -> dict[str, str]:
    """Every entry a client may keep, and its kind."""
    entries = dict(KEPT)
    for collective in COLLECTIVES.values():
        entries |= collective.client_state
    return entries


def _arrays_of(record: ArrayRecord) -> dict[str, dict[str, Any]]:
    """A record's arrays by how they travel: ``raw`` (wire.codec's, 1-D) and ``npy`` (Flower's)."""
    raw = {n: read_raw(record, n, a.dtype) for n, a in record.items() if a.stype == RAW_STYPE}
    npy = {n: read_npy(a.data, n) for n, a in record.items() if a.stype != RAW_STYPE}
    return {"raw": raw, "npy": npy}


def state_dict(state: RecordDict) -> dict[str, Any]:
    """``state`` as plain values and arrays; StateError for an entry nobody declared (a
    vector in the state store is read back first: state.vectors.vectors_in_memory)."""
    kinds = kept_entries()
    entries: dict[str, Any] = {}
    for key, record in state.items():
        kind = kinds.get(key)
        if kind is None:
            raise StateError(f"{PART}: an entry {key!r} no part of edgeflex keeps")
        if kind == CONFIG:
            if not isinstance(record, ConfigRecord):
                raise StateError(f"{PART}: {key} is not a ConfigRecord")
            entries[key] = {"kind": kind, "values": dict(record)}
        else:
            if not isinstance(record, ArrayRecord):
                raise StateError(f"{PART}: {key} is not an ArrayRecord")
            entries[key] = {"kind": kind, **_arrays_of(record)}
    return {"schema": SCHEMA, "entries": entries}


def _config(key: str, values: Any) -> ConfigRecord:
    scalar = lambda v: isinstance(v, str | bool) or is_number(v)  # noqa: E731
    if not isinstance(values, Mapping) or not all(scalar(v) for v in values.values()):
        raise StateError(f"{PART}: {key}: not a mapping of numbers and strings")
    return ConfigRecord(dict(values))


def _arrays(key: str, kind: str, body: Mapping[str, Any]) -> ArrayRecord:
    out: dict[str, Array] = {}
    for how, make in (("raw", raw_array), ("npy", Array)):
        arrays = body[how]
        if not isinstance(arrays, Mapping) or not all(
            isinstance(a, np.ndarray) for a in arrays.values()
        ):
            raise StateError(f"{PART}: {key}: {how} is not a mapping of arrays")
        if how == "raw" and any(a.ndim != 1 for a in arrays.values()):
            raise StateError(f"{PART}: {key}: a raw array of more than one dimension")
        out |= {name: make(a) for name, a in arrays.items()}
    if kind == VECTOR_ENTRY:
        vector = out.get(VECTOR)
        if set(out) != {VECTOR} or vector is None or vector.dtype != "float32":
            raise StateError(f"{PART}: {key} is not one float32 vector")
    return ArrayRecord(out)


def load_state_dict(saved: Any) -> RecordDict:
    """The RecordDict ``state_dict`` made, each entry checked against its declared kind."""
    fields = Fields(PART, saved, SCHEMA)
    entries = fields.raw("entries")
    fields.done()
    if not isinstance(entries, Mapping):
        raise StateError(f"{PART}: entries is not a mapping")
    kinds = kept_entries()
    state = RecordDict()
    for key, entry in entries.items():
        if kinds.get(key) is None:
            raise StateError(f"{PART}: an entry {key!r} no part of edgeflex keeps")
        if not isinstance(entry, Mapping) or entry.get("kind") != kinds[key]:
            raise StateError(f"{PART}: {key} is not a {kinds[key]} entry")
        body = {k: v for k, v in entry.items() if k != "kind"}
        if kinds[key] == CONFIG:
            if set(body) != {"values"}:
                raise StateError(f"{PART}: {key}: entries nobody reads: {', '.join(body)}")
            state[key] = _config(key, body["values"])
        else:
            if set(body) != {"raw", "npy"}:
                raise StateError(f"{PART}: {key}: not raw and npy arrays ({', '.join(body)})")
            state[key] = _arrays(key, kinds[key], body)
    return state


def write_state(path: Path, kind: str, state: RecordDict) -> None:
    write_archive(path, kind, {"state": state_dict(state)})


def read_state(path: Path, kind: str) -> RecordDict:
    """The state in the ``kind`` file at ``path``; StateError naming the file and the fault."""
    try:
        return load_state_dict(read_archive(path, kind, parts=("state",))["state"])
    except StateError as exc:
        raise StateError(f"{path}: {exc}") from None
