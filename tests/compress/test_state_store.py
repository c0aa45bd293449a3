"""The state store: vectors a simulated client keeps, in files instead of its context."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, RecordDict

from compress import state_store
from compress.state_store import (
    AUTO,
    DISK,
    MEMORY,
    OWNER,
    STORE_KEY,
    client_state_estimate,
    is_stored,
    make_run_directory,
    node_directory,
    sweep_abandoned,
    use_store,
    uses_disk,
)
from compress.vectors import (
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


def _owned_by(run: Path, host: str, pid: int) -> Path:
    run.mkdir()
    (run / OWNER).write_text(json.dumps([host, pid]))
    return run


def test_a_run_directory_whose_server_is_gone_is_swept(tmp_path: Path) -> None:
    here = socket.gethostname()
    mine = tmp_path / "run-1"
    make_run_directory(mine)  # this process owns it
    assert json.loads((mine / OWNER).read_text()) == [here, os.getpid()]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process id nobody has now
    abandoned = _owned_by(tmp_path / "run-2", here, gone.pid)
    (abandoned / "partition-0").mkdir()
    stranger = tmp_path / "run-3"  # no owner: not one of ours
    stranger.mkdir()
    elsewhere = _owned_by(tmp_path / "run-5", "another-host", gone.pid)  # a shared directory
    assert sweep_abandoned(tmp_path) == [abandoned]
    assert mine.is_dir() and stranger.is_dir() and elsewhere.is_dir() and not abandoned.exists()
    make_run_directory(tmp_path / "run-4")  # making one sweeps too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-1", "run-3", "run-4", "run-5"]


def test_a_run_directory_another_live_process_owns_is_refused(tmp_path: Path) -> None:
    parent = _owned_by(tmp_path / "run-7", socket.gethostname(), os.getppid())
    with pytest.raises(RuntimeError, match=f"belongs to process {os.getppid()}"):
        make_run_directory(parent)
    with pytest.raises(RuntimeError, match="on another-host, not gone"):
        make_run_directory(_owned_by(tmp_path / "run-8", "another-host", 1))


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
    assert (directory / "ef-residual.f32").stat().st_size == 4 * vector.size
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
    assert "ef-residual" not in state and not (directory / "ef-residual.f32").exists()
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
    (tmp_path / "replica.f32").write_bytes(b"\0" * 100)
    with pytest.raises(ValueError, match="holds 100 bytes, not the 64 float32"):
        load_vector(state, "replica")
    (tmp_path / "replica.f32").unlink()
    with pytest.raises(ValueError, match="replica.f32, which holds 'replica', is missing"):
        load_vector(state, "replica")
    use_store(state, None)
    with pytest.raises(ValueError, match="this node sees none"):
        load_vector(state, "replica")
