"""The state store: the vectors a simulated client keeps between rounds (error-feedback residual,
replica, values held between phases) in files on disk instead of in its ``context.state``.

Flower's simulation keeps every node's context in the driver's memory and ships it to an actor
with each message: 1,000 clients of an 11 M-parameter model, each with a residual and a
replica, would hold 89 GB there. With the store on, each such vector is one file per
(partition, key) under the run's directory, the context keeps a small record in its place, and
a round reads and writes only its own clients' files.

A file is a state file of kind ``stored-vector`` (state/archive.py), written as a run's scratch
(no fsync, no digest: the store is rewritten every round, and a checkpoint saves its vectors
itself) and renamed into place. One difference from memory: when a client's handler raises
after it wrote a file, Flower drops that message's context but the file keeps what was written.

The server decides whether a run uses the store (``state-store``) and says so by making the
run's directory, which its clients look for: nothing travels in the messages, so a run records
the same with its clients' vectors on disk or in memory. Only where clients share the server's
file system (Flower's simulation; on a Ray cluster, ``state-store-dir`` must be shared). The
server holds an exclusive lock on the run's directory (``flock`` of its ``owner.lock``) for as
long as it runs; the kernel releases it when the process ends, however it ends, so a directory
whose lock can be taken is abandoned and is swept.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from numpy.typing import NDArray

from state.archive import StateError, read_archive, write_archive
from state.fields import Fields

STORE_KEY = "state-store"  # in context.state: where this node's stored vectors are
STORE_DIRECTORY = "directory"
STORED_ENTRIES = "stored-entries"  # a stored vector's record: how many float32 entries it has
DEFAULT_ROOT = "edgeflex-state"  # under the system's temporary directory
OWNER_LOCK = "owner.lock"  # in a run's directory: locked by the server process that made it
KIND = "stored-vector"
VECTOR_SCHEMA = 1
KEPT_VECTORS = 2  # a compressed client's residual and replica, kept between rounds
MEMORY_SHARE = 0.25  # auto: the store is used when the estimate exceeds this share of memory
PROC_CGROUP = Path("/proc/self/cgroup")  # which cgroups this process is in
CGROUPS = Path("/sys/fs/cgroup")
# a container's or a job's memory limit: cgroup v2 ("0::path"), or v1's memory controller
CGROUP_LIMITS = {
    "": (CGROUPS, "memory.max"),
    "memory": (CGROUPS / "memory", "memory.limit_in_bytes"),
}

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
    """The machine's memory, or the smallest memory limit of this process's cgroups when
    that is lower (v2's ``memory.max``, v1's ``memory.limit_in_bytes``, up to the root)."""
    limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return limits[0]
    for line in lines:  # "0::/path" (v2) or "N:memory:/path" (v1)
        _, controllers, path = line.split(":", 2)
        if controllers not in CGROUP_LIMITS:
            continue
        mount, name = CGROUP_LIMITS[controllers]
        group = mount / path.lstrip("/")
        for directory in (group, *group.parents):
            try:
                limit = (directory / name).read_text().strip()
            except OSError:
                limit = ""
            if limit.isdigit():
                limits.append(int(limit))
            if directory == mount:
                break
    return min(limits)


def client_state_estimate(num_clients: int, parameters: int, compressed: bool) -> int:
    """Bytes the clients' kept vectors can come to: a residual and a replica each when the
    run compresses (a dense client keeps none)."""
    return num_clients * KEPT_VECTORS * 4 * parameters if compressed else 0


def uses_disk(mode: str, estimate: int, memory_bytes: int) -> bool:
    """``disk``, ``memory``, or ``auto``: disk when the estimate exceeds a quarter of memory."""
    if mode == AUTO:
        return estimate > MEMORY_SHARE * memory_bytes
    return mode == DISK


class RunDirectory:
    """A run's store directory, owned by this process while it holds the lock (``release``,
    or the process's end, gives it up)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Made and locked under a name no sweep looks at, then renamed into place: a sweep
        # beside it never sees the directory unlocked (it would take it as abandoned).
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
        self._lock = os.open(staging / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            staging.rename(path)
        except OSError:
            os.close(self._lock)
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def release(self) -> None:
        os.close(self._lock)


def make_run_directory(run: Path) -> RunDirectory:
    """The run's directory, locked by this process (its clients look for it). One whose owner
    is alive is refused (one run id, two runs); one whose owner is gone is replaced."""
    sweep_abandoned(run.parent)
    if run.exists():
        raise RuntimeError(f"{run} belongs to a live process (its lock is held)")
    return RunDirectory(run)


def _abandoned(run: Path) -> bool:
    """Nobody holds ``run``'s lock (its owner ended) or it never had one."""
    try:
        handle = os.open(run / OWNER_LOCK, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(handle)
    return True


def sweep_abandoned(root: Path) -> list[Path]:
    """Remove the run directories under ``root`` whose owner is gone (a run stopped by a
    signal exits without its clean-up); those removed."""
    removed = []
    for run in root.glob("run-*"):
        if run.is_dir() and _abandoned(run):
            shutil.rmtree(run, ignore_errors=True)
            removed.append(run)
    return removed


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
    return directory / f"{key}.npz"


def write_stored(directory: Path, key: str, vector: Vector) -> ConfigRecord:
    """Write ``vector`` as ``key``'s file; the record ``state`` keeps in its place. Only in a
    run's directory that exists: a message still running once its run removed it fails."""
    directory.mkdir(mode=0o700, exist_ok=True)
    part = {"schema": VECTOR_SCHEMA, "vector": np.ascontiguousarray(vector, dtype=np.float32)}
    write_archive(_file(directory, key), KIND, {"stored": part}, scratch=True)
    return ConfigRecord({STORED_ENTRIES: int(vector.size)})


def stored_clients(run: Path) -> tuple[int, int]:
    """(clients with a directory, bytes of their files) in a run's store."""
    clients = [d for d in run.glob("partition-*") if d.is_dir()]
    return len(clients), sum(f.stat().st_size for d in clients for f in d.glob("*.npz"))


def remove_stored(state: RecordDict, key: str) -> None:
    """Delete ``key``'s file (its record is the caller's to drop)."""
    directory = store_of(state)
    if directory is not None:
        _file(directory, key).unlink(missing_ok=True)


def read_stored(state: RecordDict, key: str) -> Vector:
    """``key``'s vector from this node's store (a writable array), checked against its record;
    StateError naming the file and what is wrong."""
    directory = store_of(state)
    record = state[key]
    assert isinstance(record, ConfigRecord)
    entries = int(record[STORED_ENTRIES])  # type: ignore[arg-type]
    if directory is None:
        raise StateError(
            f"{key!r} is in the state store, but this node sees none (on a Ray cluster, "
            "state-store-dir must be a directory every machine shares)"
        )
    path = _file(directory, key)
    if not path.exists():
        raise StateError(f"{path}, which holds {key!r}, is missing")
    try:
        stored = read_archive(path, KIND, parts=("stored",), scratch=True)["stored"]
        fields = Fields(f"stored {key}", stored, VECTOR_SCHEMA)
        vector = fields.array("vector", "float32", (entries,), copy=False)  # the file's own
        fields.done()
    except StateError as exc:
        raise StateError(f"{path}: {exc}") from None
    return vector
