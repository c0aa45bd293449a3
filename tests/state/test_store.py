"""The state store: vectors a simulated client keeps, in files instead of its context."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, RecordDict

from state import store as state_store
from state.archive import StateError
from state.store import (
    AUTO,
    DISK,
    MEMORY,
    OWNER_LOCK,
    STORE_KEY,
    client_state_estimate,
    is_stored,
    make_run_directory,
    node_directory,
    sweep_abandoned,
    use_store,
    uses_disk,
)
from state.vectors import (
    drop_vector,
    load_vector,
    store_vector,
    vectors_in_memory,
    vectors_into_store,
)

GIB = 1 << 30


def test_auto_goes_to_disk_when_every_clients_vectors_could_exceed_a_quarter_of_memory() -> None:
    mlp, resnet18_size = 50_000, 11_000_000
    assert client_state_estimate(1_000, resnet18_size, compressed=True) == 88_000_000_000
    assert client_state_estimate(1_000, resnet18_size, compressed=False) == 0  # dense: none
    mlp_10k = client_state_estimate(10_000, mlp, compressed=True)  # 4 GB
    assert not uses_disk(AUTO, mlp_10k, memory_bytes=24 * GIB)
    assert uses_disk(AUTO, mlp_10k, memory_bytes=8 * GIB)  # the same run on a smaller host
    assert uses_disk(AUTO, client_state_estimate(100, resnet18_size, True), 24 * GIB)  # 8.8 GB
    assert not uses_disk(AUTO, client_state_estimate(10, resnet18_size, True), 24 * GIB)
    assert uses_disk(DISK, 0, memory_bytes=24 * GIB)
    assert not uses_disk(MEMORY, 10**12, memory_bytes=24 * GIB)


def test_auto_reads_the_smallest_memory_limit_of_the_processs_cgroups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    (v2 / "slurm" / "job").mkdir(parents=True)
    (v2 / "slurm" / "memory.max").write_text(f"{3 * GIB}\n")
    (v2 / "slurm" / "job" / "memory.max").write_text("max\n")  # no limit of its own
    (v1 / "docker").mkdir(parents=True)
    (v1 / "docker" / "memory.limit_in_bytes").write_text(f"{5 * GIB}\n")
    monkeypatch.setattr(
        state_store,
        "CGROUP_LIMITS",
        {"": (v2, "memory.max"), "memory": (v1, "memory.limit_in_bytes")},
    )
    cgroups = tmp_path / "cgroup"
    monkeypatch.setattr(state_store, "PROC_CGROUP", cgroups)
    cgroups.write_text("0::/slurm/job\n")
    assert state_store.usable_memory_bytes() == 3 * GIB  # the parent's limit holds
    cgroups.write_text("4:memory:/docker\n0::/\n")
    assert state_store.usable_memory_bytes() == 5 * GIB
    cgroups.write_text("0::/elsewhere\n")  # no limit anywhere: the machine's memory
    assert state_store.usable_memory_bytes() > 5 * GIB


HOLD_LOCK = """
import fcntl, os, sys, time
handle = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(handle, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def _held_by_another_process(run: Path) -> subprocess.Popen[str]:
    """``run`` locked by a live child process (a server of another run)."""
    run.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run / OWNER_LOCK)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    return child


def test_a_run_directory_whose_server_is_gone_is_swept(tmp_path: Path) -> None:
    mine = make_run_directory(tmp_path / "run-1")  # this process holds its lock
    live = _held_by_another_process(tmp_path / "run-2")
    gone = _held_by_another_process(tmp_path / "run-3")
    (tmp_path / "run-3" / "partition-0").mkdir()
    gone.kill()  # the kernel releases its lock, whatever way it ended
    gone.wait()
    unlocked = tmp_path / "run-4"  # no lock at all: nobody owns it
    unlocked.mkdir()
    try:
        assert sorted(sweep_abandoned(tmp_path)) == [tmp_path / "run-3", unlocked]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run-1", "run-2"]
        mine.release()  # this run ended: the next sweep takes its directory
        make_run_directory(tmp_path / "run-5")  # making one sweeps too
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run-2", "run-5"]
    finally:
        live.kill()
        live.wait()


def test_a_run_directory_another_live_process_owns_is_refused(tmp_path: Path) -> None:
    live = _held_by_another_process(tmp_path / "run-7")
    try:
        with pytest.raises(RuntimeError, match="belongs to a live process"):
            make_run_directory(tmp_path / "run-7")
    finally:
        live.kill()
        live.wait()


def test_a_sweep_beside_a_directory_being_made_never_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run's sweep at the worst moment, as the lock file is made: the directory is not
    under its run name yet, so the sweep cannot take it for abandoned."""
    opened = state_store.os.open
    swept: list[list[Path]] = []

    def open_after_a_sweep(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith(OWNER_LOCK):
            swept.append(sweep_abandoned(tmp_path))
        return opened(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(state_store.os, "open", open_after_a_sweep)
    made = make_run_directory(tmp_path / "run-11")
    monkeypatch.setattr(state_store.os, "open", opened)
    assert swept and swept[-1] == []
    assert (tmp_path / "run-11" / OWNER_LOCK).is_file()
    assert sweep_abandoned(tmp_path) == []  # locked under its name
    assert [p.name for p in tmp_path.iterdir()] == ["run-11"]  # no staging directory left
    made.release()


def test_a_vector_is_written_only_in_a_run_directory_that_exists(tmp_path: Path) -> None:
    state = RecordDict()
    use_store(state, tmp_path / "run-9" / "partition-0")  # the run's directory is gone
    with pytest.raises(FileNotFoundError):
        store_vector(state, "replica", np.ones(3, dtype=np.float32))
    assert not (tmp_path / "run-9").exists()


def test_a_node_with_a_store_keeps_a_record_in_its_state_and_the_vector_in_a_file(
    tmp_path: Path,
) -> None:
    state = RecordDict()
    directory = node_directory(str(tmp_path), run_id=7, partition_id=3)
    assert directory == tmp_path / "run-7" / "partition-3"
    directory.parent.mkdir()  # the server makes the run's directory
    use_store(state, directory)
    vector = (np.arange(1000) / 7).astype(np.float32)
    store_vector(state, "ef-residual", vector)
    assert is_stored(state["ef-residual"]) and not isinstance(state["ef-residual"], ArrayRecord)
    assert (directory / "ef-residual.npz").is_file()
    loaded = load_vector(state, "ef-residual")
    assert loaded is not None
    np.testing.assert_array_equal(loaded, vector)
    loaded[:] = 0  # a writable copy: the file keeps what was stored
    np.testing.assert_array_equal(load_vector(state, "ef-residual"), vector)  # type: ignore[arg-type]
    # A checkpoint gets the vectors themselves and no store.
    held = vectors_in_memory(state)
    assert STORE_KEY not in held and isinstance(held["ef-residual"], ArrayRecord)
    np.testing.assert_array_equal(load_vector(held, "ef-residual"), vector)  # type: ignore[arg-type]
    # Dropped, a stored vector's file goes too.
    drop_vector(state, "ef-residual")
    assert "ef-residual" not in state and not (directory / "ef-residual.npz").exists()
    # A restored state's vectors go into the store.
    held["other"] = ArrayRecord()
    use_store(held, directory)
    vectors_into_store(held)
    assert is_stored(held["ef-residual"]) and isinstance(held["other"], ArrayRecord)
    np.testing.assert_array_equal(load_vector(held, "ef-residual"), vector)  # type: ignore[arg-type]
    # Without a store, vectors stay in the state.
    use_store(state, None)
    store_vector(state, "replica", vector)
    assert STORE_KEY not in state and isinstance(state["replica"], ArrayRecord)


def test_a_stored_vector_that_is_missing_or_cut_short_is_refused(tmp_path: Path) -> None:
    state = RecordDict()
    use_store(state, tmp_path)
    store_vector(state, "replica", np.ones(64, dtype=np.float32))
    (tmp_path / "replica.npz").write_bytes(b"\0" * 100)
    with pytest.raises(StateError, match="replica.npz: not an edgeflex state file"):
        load_vector(state, "replica")
    (tmp_path / "replica.npz").unlink()
    with pytest.raises(StateError, match="replica.npz, which holds 'replica', is missing"):
        load_vector(state, "replica")
    use_store(state, None)
    with pytest.raises(StateError, match="this node sees none"):
        load_vector(state, "replica")
