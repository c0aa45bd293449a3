"""The state store: the vectors a simulated client keeps between rounds (error-feedback residual,
replica, values held between phases) in files on disk instead of in its ``context.state``.

Flower's simulation keeps every node's context in the driver's memory and ships it to an actor
with each message: 1,000 clients of an 11 M-parameter model, each with a residual and a
replica, would hold 89 GB there. With the store on, each such vector is one file per
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

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from numpy.typing import NDArray

STORE_KEY = "state-store"  # in context.state: where this node's stored vectors are
STORE_DIRECTORY = "directory"
STORED_ENTRIES = "stored-entries"  # a stored vector's record: how many float32 entries it has
DEFAULT_ROOT = "edgeflex-state"  # under the system's temporary directory
OWNER = "owner.json"  # in a run's directory: [host, pid] of the server process that made it
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


def make_run_directory(run: Path) -> None:
    """The run's directory, owned by this process (its clients look for it). Another live
    process's is refused (one run id, two runs); one whose owner is gone is replaced."""
    sweep_abandoned(run.parent)
    owner = _owner(run)
    if owner is not None and owner != _me() and (owner[0] != _me()[0] or _alive(owner[1])):
        raise RuntimeError(f"{run} belongs to process {owner[1]} on {owner[0]}, not gone")
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(mode=0o700, parents=True)
    (run / OWNER).write_text(json.dumps(list(_me())))


def sweep_abandoned(root: Path) -> list[Path]:
    """Remove the run directories under ``root`` made on this machine by a process that is
    gone (a run stopped by a signal exits without its clean-up); those removed. Another
    machine's (a shared state-store-dir) are left to it."""
    removed = []
    for run in root.glob("run-*"):
        owner = _owner(run)
        if owner is not None and owner[0] == _me()[0] and not _alive(owner[1]):
            shutil.rmtree(run, ignore_errors=True)
            removed.append(run)
    return removed


def _me() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


def _owner(run: Path) -> tuple[str, int] | None:
    """(host, pid) of the process that made ``run``; None if it is not one of ours."""
    try:
        host, pid = json.loads((run / OWNER).read_text())
        return str(host), int(pid)
    except (OSError, ValueError, TypeError):
        return None


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


def stored_clients(run: Path) -> tuple[int, int]:
    """(clients with a directory, bytes of their files) in a run's store."""
    clients = [d for d in run.glob("partition-*") if d.is_dir()]
    return len(clients), sum(f.stat().st_size for d in clients for f in d.glob("*.f32"))


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
