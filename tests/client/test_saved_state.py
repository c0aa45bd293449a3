"""A client's state across a checkpoint: written where the server asks, inside its run's
results directory only, and read back whole."""

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from client.node import LOCAL_DATA_KEY
from client.saved_state import KIND, restore_state, save_state, state_file
from client.state import read_state
from common.settings import settings_with
from state.archive import StateError, write_archive
from state.store import is_stored, store_of, use_store
from state.vectors import load_vector, store_vector
from wire.keys import RESTORE_STATE, SAVE_STATE
from wire.queries import StateRequest, parse_state_reply

pytestmark = pytest.mark.usefixtures("task_identity")


def _context(results: Path, **overrides: object) -> Context:
    settings = settings_with(num_clients=3, **({"results_dir": str(results)} | overrides))
    return Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 2, "num-partitions": 3},
        state=RecordDict(),
        run_config=settings.to_run_config(),
    )


def _ask(kind: str, directory: Path) -> Message:
    return Message(
        content=StateRequest(2, str(directory)).to_content(), message_type=kind, dst_node_id=7
    )


def test_a_saved_state_comes_back_whole_and_replaces_what_was_there(tmp_path: Path) -> None:
    before = _context(tmp_path)
    store_vector(before.state, "ef-residual", np.arange(4, dtype=np.float32))
    before.state["stream"] = ConfigRecord({"clock-s": 1.5})
    before.state[LOCAL_DATA_KEY] = ArrayRecord({"x": Array(np.zeros(3, dtype=np.float32))})
    directory = tmp_path / "client-state" / "round-2"
    reply = save_state(_ask(SAVE_STATE, directory), before)
    assert parse_state_reply(reply.content, 3) == (2, False)
    assert state_file(directory, 2).is_file()

    after = _context(tmp_path / "elsewhere", resume_from=str(tmp_path))
    after.state["left-over"] = ConfigRecord({"x": 1})
    reply = restore_state(_ask(RESTORE_STATE, directory), after)
    assert parse_state_reply(reply.content, 3) == (2, True)
    assert set(after.state) == {"ef-residual", "stream"}  # the cached data is made again
    np.testing.assert_array_equal(load_vector(after.state, "ef-residual"), np.arange(4))  # type: ignore[arg-type]


def test_no_saved_state_is_said_and_nothing_changes(tmp_path: Path) -> None:
    context = _context(tmp_path)
    context.state["stream"] = ConfigRecord({"clock-s": 1.5})
    reply = restore_state(_ask(RESTORE_STATE, tmp_path / "client-state" / "round-9"), context)
    assert parse_state_reply(reply.content, 3) == (2, False)
    assert set(context.state) == {"stream"}


def test_a_directory_outside_the_run_or_not_a_round_of_states_is_refused(tmp_path: Path) -> None:
    context = _context(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere" / "client-state" / "round-2"
    with pytest.raises(ValueError, match="is not in"):
        save_state(_ask(SAVE_STATE, elsewhere), context)
    with pytest.raises(ValueError, match="is not a client-state/round-R directory"):
        restore_state(_ask(RESTORE_STATE, Path("/etc")), context)
    assert not elsewhere.exists()
    # With the default results-dir (the server's timestamped one is not known here) only the
    # shape of the path is checked.
    default = _context(tmp_path / "unused", results_dir="")
    save_state(_ask(SAVE_STATE, elsewhere), default)
    assert state_file(elsewhere, 2).is_file()


def test_a_saved_state_holds_the_stores_vectors_and_one_naming_files_is_refused(
    tmp_path: Path,
) -> None:
    before = _context(tmp_path)
    store = tmp_path / "store" / "run-1" / "partition-2"
    store.parent.mkdir(parents=True)
    use_store(before.state, store)
    store_vector(before.state, "ef-residual", np.arange(5, dtype=np.float32))
    directory = tmp_path / "client-state" / "round-2"
    save_state(_ask(SAVE_STATE, directory), before)
    saved = read_state(state_file(directory, 2), KIND)
    assert set(saved) == {"ef-residual"} and isinstance(saved["ef-residual"], ArrayRecord)

    # Restored in a run with a state store, the vector goes straight to the node's files.
    resumed_store = tmp_path / "resumed-store"
    after = _context(
        tmp_path / "elsewhere", resume_from=str(tmp_path), state_store_dir=str(resumed_store)
    )
    (resumed_store / "run-1").mkdir(parents=True)  # as the resumed run's server makes it
    restore_state(_ask(RESTORE_STATE, directory), after)
    assert store_of(after.state) == resumed_store / "run-1" / "partition-2"
    assert is_stored(after.state["ef-residual"])
    np.testing.assert_array_equal(load_vector(after.state, "ef-residual"), np.arange(5))  # type: ignore[arg-type]

    # A state file that points at files (a store's records) is not a saved state: its entries
    # are not the kinds a client keeps.
    entries = {"state-store": {"kind": "config", "values": {"directory": str(store)}}}
    pointing = {"state": {"schema": 1, "entries": entries}}
    write_archive(state_file(directory, 2), KIND, pointing)
    with pytest.raises(StateError, match="an entry 'state-store' no part of edgeflex keeps"):
        restore_state(_ask(RESTORE_STATE, directory), _context(tmp_path))
    stored = {"ef-residual": {"kind": "vector", "values": {"stored-entries": 5}}}
    write_archive(state_file(directory, 2), KIND, {"state": {"schema": 1, "entries": stored}})
    with pytest.raises(StateError, match="ef-residual: not raw and npy arrays"):
        restore_state(_ask(RESTORE_STATE, directory), _context(tmp_path))
