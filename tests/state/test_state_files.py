"""Every kind of state file refuses a damaged or crafted copy with a message naming the file
and the field: a checkpoint, a client's saved state and a vector in the state store, each cut
short, with an array of another dtype or shape, another schema version, a field nobody reads
or one missing. The crafted files carry a correct SHA-256: what refuses them is the check of
each field, not the hash."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from client.saved_state import KIND as CLIENT_STATE
from client.state import read_state, write_state
from commands.run_config import parse_overrides, resolve_settings
from common.flower_patches import set_task_identity
from common.settings import ConfigError
from compress.error_feedback import RESIDUAL_KEY
from server.build import build_strategy
from server.checkpoint import CHECKPOINT_NAME, read_checkpoint
from state.archive import StateError
from state.store import use_store
from state.vectors import load_vector, store_vector
from tests.helpers import run_server_app_spying_build
from tests.state.archives import npy, rewrite

pytestmark = pytest.mark.usefixtures("task_identity")

SIZE = 64  # the stored vector's and the client residual's entries
Pristine = dict[str, tuple[Path, Callable[[Path], Any], bytes]]  # kind -> path, reader, bytes


@dataclass(frozen=True)
class StateFile:
    """One kind of file: where its part's fields sit in the manifest, which member holds the
    array the faults change, and the words its refusals use."""

    fields: Callable[[dict[str, Any]], dict[str, Any]]  # the part whose fields change
    array: Callable[[dict[str, Any]], dict[str, Any]]  # the {"$array": name} of one array
    part: str  # how the refusals name the part
    array_field: str
    field: str  # a field the part cannot do without


def _checkpoint(directory: Path) -> tuple[Path, Callable[[Path], Any]]:
    overrides = "num-clients=3 num-server-rounds=2 seed=4 checkpoint-every=2 "
    overrides += "collective=allgather compression-ratio=0.05"
    settings = resolve_settings(parse_overrides(overrides) | {"results-dir": str(directory)})
    args = run_server_app_spying_build(settings)[0][0]
    config = settings.to_run_config() | {"num-server-rounds": 3}
    return directory / CHECKPOINT_NAME, lambda p: read_checkpoint(p, config, build_strategy(*args))


def _client_state(directory: Path) -> tuple[Path, Callable[[Path], Any]]:
    state = RecordDict()
    store_vector(state, RESIDUAL_KEY, np.linspace(-1, 1, SIZE, dtype=np.float32))
    state["stream"] = ConfigRecord({"clock-s": 1.5})
    path = directory / "partition-2.npz"
    write_state(path, CLIENT_STATE, state)
    return path, lambda p: read_state(p, CLIENT_STATE)


def _stored_vector(directory: Path) -> tuple[Path, Callable[[Path], Any]]:
    state = RecordDict()
    use_store(state, directory)
    store_vector(state, "replica", np.ones(SIZE, dtype=np.float32))
    return directory / "replica.npz", lambda _: load_vector(state, "replica")


MAKERS = {"checkpoint": _checkpoint, "client-state": _client_state, "stored": _stored_vector}
KINDS = {
    "checkpoint": StateFile(
        fields=lambda m: m["parts"]["model"],
        array=lambda m: m["parts"]["model"]["vector"],
        part="model",
        array_field="vector",
        field="vector",
    ),
    "client-state": StateFile(
        fields=lambda m: m["parts"]["state"],
        array=lambda m: m["parts"]["state"]["entries"][RESIDUAL_KEY]["raw"]["vector"],
        part="client state",
        array_field=RESIDUAL_KEY,
        field="entries",
    ),
    "stored": StateFile(
        fields=lambda m: m["parts"]["stored"],
        array=lambda m: m["parts"]["stored"]["vector"],
        part="stored replica",
        array_field="vector",
        field="vector",
    ),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """One file of each kind, written once by edgeflex itself (copied by every test)."""
    restore = set_task_identity()  # module-scoped: before the task_identity fixture
    try:
        made = {kind: make(tmp_path_factory.mktemp(kind)) for kind, make in MAKERS.items()}
    finally:
        restore()
    return {kind: (path, read, path.read_bytes()) for kind, (path, read) in made.items()}


def _copy(pristine: Pristine, kind: str, tmp_path: Path) -> Path:
    (tmp_path / "copy.npz").write_bytes(pristine[kind][2])
    return tmp_path / "copy.npz"


def _read_in_place(pristine: Pristine, kind: str, path: Path) -> Any:
    """Read ``path`` as the kind's file (the reader knows its file by where it lies: the
    store's key), then put the file edgeflex wrote back."""
    source, read, written = pristine[kind]
    shutil.copy(path, source)
    try:
        return read(source)
    finally:
        source.write_bytes(written)


def _refusal(pristine: Pristine, kind: str, path: Path) -> str:
    """What reading ``path`` says; the test fails if it reads."""
    with pytest.raises((StateError, ConfigError)) as refused:
        _read_in_place(pristine, kind, path)
    return str(refused.value)


def _member(manifest: dict[str, Any], kind: str) -> str:
    return f"{KINDS[kind].array(manifest)['$array']}.npy"


def _other_dtype(manifest: dict[str, Any], members: dict[str, bytes], kind: str) -> None:
    members[_member(manifest, kind)] = npy(np.zeros(SIZE, dtype=np.float64))


def _other_shape(manifest: dict[str, Any], members: dict[str, bytes], kind: str) -> None:
    members[_member(manifest, kind)] = npy(np.zeros((2, SIZE), dtype=np.float32))


def _other_schema(manifest: dict[str, Any], members: dict[str, bytes], kind: str) -> None:
    KINDS[kind].fields(manifest)["schema"] = 2


def _extra_field(manifest: dict[str, Any], members: dict[str, bytes], kind: str) -> None:
    KINDS[kind].fields(manifest)["planted"] = 1


def _missing_field(manifest: dict[str, Any], members: dict[str, bytes], kind: str) -> None:
    member = _member(manifest, kind)
    del KINDS[kind].fields(manifest)[KINDS[kind].field]
    del members[member]  # and the array it named, which would otherwise be refused as unread


CRAFTED = {
    "dtype": (_other_dtype, "{array}.*(dtype float64, expected float32|not one float32 vector)"),
    "shape": (
        _other_shape,
        r"{array}.*(shape \(2, 64\), expected|a raw array of more than one dimension)",
    ),
    "schema": (_other_schema, "{part}: schema 2, this edgeflex reads 1"),
    "extra": (_extra_field, "{part}: entries nobody reads: planted"),
    "missing": (_missing_field, "{part}: {field} is missing"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_state_file_cut_short_is_refused_naming_the_file(
    kind: str, pristine: Pristine, tmp_path: Path
) -> None:
    path = _copy(pristine, kind, tmp_path)
    data = pristine[kind][2]
    for cut in (len(data) // 2, len(data) - 10, 30):
        path.write_bytes(data[:cut])
        message = _refusal(pristine, kind, path)
        assert str(pristine[kind][0]) in message
        assert "not a readable edgeflex state file" in message or "truncated" in message


@pytest.mark.parametrize("fault", list(CRAFTED))
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_crafted_state_file_is_refused_naming_the_file_part_and_field(
    kind: str, fault: str, pristine: Pristine, tmp_path: Path
) -> None:
    change, expected = CRAFTED[fault]
    path = _copy(pristine, kind, tmp_path)
    rewrite(path, lambda manifest, members: change(manifest, members, kind), rehash=True)
    message = _refusal(pristine, kind, path)
    spec = KINDS[kind]
    pattern = expected.format(part=spec.part, array=spec.array_field, field=spec.field)
    assert str(pristine[kind][0]) in message
    assert re.search(pattern, message), message


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_file_each_test_damages_reads_back_as_written(
    kind: str, pristine: Pristine, tmp_path: Path
) -> None:
    """The control: an untouched copy, rewritten the same way, reads (so the refusals above
    come from the faults, not from the rewriting)."""
    path = _copy(pristine, kind, tmp_path)
    rewrite(path, lambda manifest, members: None, rehash=True)
    assert _read_in_place(pristine, kind, path) is not None


@pytest.mark.parametrize(
    ("observations", "expected"),
    [
        ({"x": []}, "observations has a key 'x' that is no integer"),
        ({"3": [["up", 100, -1.0]]}, r"observations\[3\]: \['up', 100, -1.0\] is not \[direction"),
    ],
)
def test_a_checkpoint_names_the_nested_part_and_value_that_is_wrong(
    observations: dict[str, Any], expected: str, pristine: Pristine, tmp_path: Path
) -> None:
    def change(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest["parts"]["strategy"]["times"]["estimator"]["observations"] = observations

    path = _copy(pristine, "checkpoint", tmp_path)
    rewrite(path, change, rehash=True)
    assert re.search(
        f"checkpoint.npz: link estimator: {expected}", _refusal(pristine, "checkpoint", path)
    )
