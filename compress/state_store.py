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
One difference from memory: when a client's handler raises after it wrote a file, Flower
drops that message's context but the file keeps what was written.
The server decides whether a run uses the store (``state-store``) and says so by making the
run's directory, which its clients look for: nothing travels in the messages, so a run records
the same with its clients' vectors on disk or in memory. Only where clients share the server's
file system (Flower's simulation; on a Ray cluster, ``state-store-dir`` must be shared).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from numpy.typing import NDArray

STORE_KEY = "state-store"  # in context.state: where this node's stored vectors are
STORE_DIRECTORY = "directory"
STORED_ENTRIES = "stored-entries"  # a stored vector's record: how many float32 entries it has
DEFAULT_ROOT = "edgeflex-state"  # under the system's temporary directory
OWNER = "owner.pid"  # in a run's directory: the server process that made it
KEPT_VECTORS = 2  # a compressed client's residual and replica, kept between rounds
MEMORY_SHARE = 0.25  # auto: the store is used when the estimate exceeds this share of memory
CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")  # a container's or a job's memory (cgroup v2)

AUTO, MEMORY, DISK = "auto", "memory", "disk"
STATE_STORES = (AUTO, MEMORY, DISK)

Vector = NDArray[np.float32]


def store_root(store_dir: str) -> Path:
    """``state-store-dir``, or the temporary directory's ``edgeflex-state``."""
    return Path(store_dir) if store_dir else Path(tempfile.gettempdir()) / DEFAULT_ROOT


def run_directory(store_dir: str, run_id: int) -> Path:
    """Where a run's stored vectors go: a directory per run under the root."""
    return store_root(store_dir) / f"run-{run_id}"


def node_directory(store_dir: str, run_id: int, partition_id: int) -> Path:
    return run_directory(store_dir, run_id) / f"partition-{partition_id}"


def usable_memory_bytes() -> int:
    """The machine's memory, or the cgroup's limit when that is lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = CGROUP_LIMIT.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical


def client_state_estimate(num_clients: int, parameters: int, compressed: bool) -> int:
    """Bytes the clients' kept vectors can come to: a residual and a replica each when the
    run compresses (a dense client keeps none)."""
    return num_clients * KEPT_VECTORS * 4 * parameters if compressed else 0


def uses_disk(mode: str, estimate: int, memory_bytes: int) -> bool:
    """``disk``, ``memory``, or ``auto``: disk when the estimate exceeds a quarter of memory."""
    if mode == AUTO:
        return estimate > MEMORY_SHARE * memory_bytes
    return mode == DISK


def make_run_directory(run: Path) -> None:
    """The run's directory, owned by this process (its clients look for it); first the
    directories of runs whose server is gone (stopped by a signal, its clean-up never ran)."""
    sweep_abandoned(run.parent)
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(mode=0o700, parents=True)
    (run / OWNER).write_text(str(os.getpid()))


def sweep_abandoned(root: Path) -> list[Path]:
    """Remove the run directories under ``root`` whose owner process is gone; those removed."""
    removed = []
    for run in root.glob("run-*"):
        try:
            owner = int((run / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or being made
        if not _alive(owner):
            shutil.rmtree(run, ignore_errors=True)
            removed.append(run)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


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
    """Write ``vector`` as ``key``'s file; the record ``state`` keeps in its place. Only in a
    run's directory that exists: a message still running once its run removed it fails."""
    directory.mkdir(mode=0o700, exist_ok=True)
    # a name of its own (two messages for one node may overlap after a timeout); not synced:
    # the store is a run's scratch, and a checkpoint saves its vectors itself
    handle, partial = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".partial")
    with os.fdopen(handle, "wb") as f:
        f.write(np.ascontiguousarray(vector, dtype=np.float32).tobytes())
    os.replace(partial, _file(directory, key))
    return ConfigRecord({STORED_ENTRIES: int(vector.size)})


def remove_stored(state: RecordDict, key: str) -> None:
    """Delete ``key``'s file (its record is the caller's to drop)."""
    directory = store_of(state)
    if directory is not None:
        _file(directory, key).unlink(missing_ok=True)


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
    try:
        with path.open("rb") as f:
            found = os.fstat(f.fileno()).st_size
            if found != 4 * entries:
                raise ValueError(
                    f"{path} holds {found} bytes, not the {entries} float32 of {key!r}"
                )
            return np.fromfile(f, dtype=np.float32)
    except FileNotFoundError:
        raise ValueError(f"{path}, which holds {key!r}, is missing") from None
