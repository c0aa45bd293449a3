"""The state store: vectors a simulated client keeps, in files instead of its context."""

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, RecordDict

from compress.base import load_vector, store_vector, vectors_in_memory
from compress.state_store import (
    AUTO,
    DISK,
    MEMORY,
    STORE_KEY,
    client_state_estimate,
    is_stored,
    node_directory,
    use_store,
    uses_disk,
)

GIB = 1 << 30


def test_auto_goes_to_disk_when_every_clients_vectors_could_exceed_a_quarter_of_memory() -> None:
    mlp, resnet18_size = 50_000, 11_000_000
    assert client_state_estimate(1_000, resnet18_size) == 88_000_000_000  # the 88 GB
    assert not uses_disk(AUTO, 10_000, mlp, memory_bytes=24 * GIB)  # 4 GB of 24 GiB
    assert uses_disk(AUTO, 10_000, mlp, memory_bytes=8 * GIB)  # the same run on a smaller host
    assert uses_disk(AUTO, 100, resnet18_size, memory_bytes=24 * GIB)  # 8.8 GB
    assert not uses_disk(AUTO, 10, resnet18_size, memory_bytes=24 * GIB)
    assert uses_disk(DISK, 1, 1, memory_bytes=24 * GIB)
    assert not uses_disk(MEMORY, 1_000, resnet18_size, memory_bytes=24 * GIB)


def test_a_node_with_a_store_keeps_a_record_in_its_state_and_the_vector_in_a_file(
    tmp_path: Path,
) -> None:
    state = RecordDict()
    directory = node_directory(str(tmp_path), run_id=7, partition_id=3)
    assert directory == tmp_path / "run-7" / "partition-3"
    use_store(state, directory)
    vector = np.arange(1000, dtype=np.float32) / 7
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
