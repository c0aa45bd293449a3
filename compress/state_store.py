"""The state store: the vectors a simulated client keeps between rounds (error-feedback residual,
replica, values held between phases) in files on disk instead of in its ``context.state``.

Flower's simulation keeps every node's context in the driver's memory and ships it to an actor
with each message: 1,000 clients of an 11 M-parameter model, each with a residual and a
replica, would hold ~88 GB there. With the store on, each such vector is one file per
(partition, key) under the run's directory, the context keeps a small record in its place, and
a round reads and writes only its own clients' files.

The files are raw float32, written whole to a temporary name and renamed into place (a run
stopped mid-write leaves the last complete file). They are not memory-mapped: a client reads
and rewrites every kept vector whole each round, so a mapping would page the same bytes in.
The server decides whether a run uses the store (``state-store``) and says so by making the
run's directory, which its clients look for: nothing travels in the messages, so a run records
the same with its clients' vectors on disk or in memory. Only where clients share the server's
file system (Flower's simulation; on a Ray cluster, ``state-store-dir`` must be shared).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from numpy.typing import NDArray

STORE_KEY = "state-store"  # in context.state: where this node's stored vectors are
STORE_DIRECTORY = "directory"
STORED_ENTRIES = "stored-entries"  # a stored vector's record: how many float32 entries it has
DEFAULT_ROOT = "edgeflex-state"  # under the system's temporary directory
KEPT_VECTORS = 2  # a compressed client's residual and replica: what the estimate counts
MEMORY_SHARE = 0.25  # auto: the store is used when the estimate exceeds this share of memory

AUTO, MEMORY, DISK = "auto", "memory", "disk"
STATE_STORES = (AUTO, MEMORY, DISK)

Vector = NDArray[np.float32]


def run_directory(store_dir: str, run_id: int) -> Path:
    """Where a run's stored vectors go: ``state-store-dir`` (or the temporary directory's
    ``edgeflex-state``), then one directory per run."""
    root = Path(store_dir) if store_dir else Path(tempfile.gettempdir()) / DEFAULT_ROOT
    return root / f"run-{run_id}"


def node_directory(store_dir: str, run_id: int, partition_id: int) -> Path:
    return run_directory(store_dir, run_id) / f"partition-{partition_id}"


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def client_state_estimate(num_clients: int, parameters: int) -> int:
    """Bytes the clients' kept vectors can come to in memory: a residual and a replica each."""
    return num_clients * KEPT_VECTORS * 4 * parameters


def uses_disk(mode: str, num_clients: int, parameters: int, memory_bytes: int) -> bool:
    """``disk``, ``memory``, or ``auto``: disk when the estimate exceeds a quarter of memory."""
    if mode == AUTO:
        return client_state_estimate(num_clients, parameters) > MEMORY_SHARE * memory_bytes
    return mode == DISK


def use_store(state: RecordDict, directory: Path | None) -> None:
    """From now on keep this node's vectors in ``directory`` (None: in ``state``)."""
    if directory is None:
        if STORE_KEY in state:
            del state[STORE_KEY]
        return
    state[STORE_KEY] = ConfigRecord({STORE_DIRECTORY: str(directory)})


def store_of(state: RecordDict) -> Path | None:
    """The directory this node keeps its vectors in, if it uses the store."""
    if STORE_KEY not in state:
        return None
    record = state[STORE_KEY]
    assert isinstance(record, ConfigRecord)
    return Path(str(record[STORE_DIRECTORY]))


def is_stored(record: object) -> bool:
    return isinstance(record, ConfigRecord) and STORED_ENTRIES in record


def _file(directory: Path, key: str) -> Path:
    return directory / f"{key}.f32"


def write_stored(directory: Path, key: str, vector: Vector) -> ConfigRecord:
    """Write ``vector`` as ``key``'s file; the record ``state`` keeps in its place."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = _file(directory, key)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)  # created anew, never through a link left in its place
    # not synced: the store is a run's scratch, and a checkpoint saves its vectors itself
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(partial, flags, 0o600), "wb") as f:
        f.write(np.ascontiguousarray(vector, dtype=np.float32).tobytes())
    partial.replace(path)
    return ConfigRecord({STORED_ENTRIES: int(vector.size)})


def read_stored(state: RecordDict, key: str) -> Vector:
    """``key``'s vector from this node's store (a writable array), checked against its record."""
    directory = store_of(state)
    record = state[key]
    assert isinstance(record, ConfigRecord)
    entries = int(record[STORED_ENTRIES])  # type: ignore[arg-type]
    if directory is None:
        raise ValueError(
            f"{key!r} is in the state store, but this node sees none (on a Ray cluster, "
            "state-store-dir must be a directory every machine shares)"
        )
    path = _file(directory, key)
    if not path.is_file():
        raise ValueError(f"{path}, which holds {key!r}, is missing")
    if path.stat().st_size != 4 * entries:
        found = path.stat().st_size
        raise ValueError(f"{path} holds {found} bytes, not the {entries} float32 of {key!r}")
    return np.fromfile(path, dtype=np.float32)
