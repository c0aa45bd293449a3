"""Checkpoint and resume, in process: a run that crashed after its last checkpoint, resumed
by new nodes that take their partitions' saved state back (as a restarted simulation does),
against the same run uninterrupted."""

import io
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord

from client import app as client_app
from client.replica import REPLICA_KEY
from commands.run_config import parse_overrides, resolve_settings
from common.settings import ConfigError
from compress.error_feedback import RESIDUAL_KEY
from server import app as server_app
from server import build as server_build
from server.checkpoint import CHECKPOINT_NAME, differing_keys, read_checkpoint
from server.client_states import restore_client_states
from server.records import read_rounds, without_wall_clock
from state.archive import LAYOUT, flatten
from state.store import is_stored
from testing.in_process import InProcessGrid, run_server_app
from tests.helpers import run_server_app_spying_build
from tests.state.archives import rewrite
from wire.keys import CLIENT_STATE_DIR, CONFIG_KEY, SERVER_ROUND
from wire.packing import unpack

pytestmark = pytest.mark.usefixtures("task_identity")

DENSE = "num-clients=3 num-server-rounds=5 seed=4"
TOPK = f"{DENSE} collective=auto cr-schedule=nsga2 cr-warmup-rounds=1 " + (
    "cr-population=8 cr-generations=4"
)


class Crash(RuntimeError):
    pass


class CrashingGrid(InProcessGrid):
    """Dies on the first exchange of round ``crash_round`` (a power cut mid-round)."""

    def __init__(self, settings: Any, crash_round: int) -> None:
        super().__init__(settings)
        self.crash_round = crash_round
        self.exchanges = 0

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        messages = list(messages)
        configs = [unpack(m.content).config_records.get(CONFIG_KEY) for m in messages]
        rounds = {c[SERVER_ROUND] for c in configs if c is not None}  # not identify queries
        if self.crash_round in rounds:
            raise Crash(f"power cut in round {self.crash_round}")
        return super().send_and_receive(messages, timeout=timeout)


def _settings(text: str, results_dir: Path) -> Any:
    return resolve_settings(parse_overrides(text) | {"results-dir": str(results_dir)})


def _rows(results_dir: Path) -> list[dict[str, Any]]:
    return [without_wall_clock(row) for row in read_rounds(results_dir)]


def _crash_then_resume(text: str, tmp_path: Path, crash_round: int) -> Path:
    stopped = tmp_path / "stopped"
    grid = CrashingGrid(_settings(f"{text} checkpoint-every=2", stopped), crash_round)
    with pytest.raises(Crash):
        run_server_app(grid)
    assert (stopped / CHECKPOINT_NAME).is_file()
    assert [r["round"] for r in read_rounds(stopped)] == list(range(1, crash_round))
    # Resumed into the same directory by a new federation: new node ids, the clients' state
    # is gone.
    resumed = f"{text} checkpoint-every=2 resume-from={stopped}"
    run_server_app(InProcessGrid(_settings(resumed, stopped), first_node_id=500))
    return stopped


# Every strategy: a resumed run records what the uninterrupted run does (wall clock aside).
RESUMED = {
    "dense": DENSE,
    "allgather": f"{DENSE} collective=allgather compression-ratio=0.05",
    "allreduce-star": f"{DENSE} collective=allreduce leader=star",
    "nsga2-auto": TOPK,
    "scadles": f"configs/scadles.toml {DENSE}",
    # beyond issue 40's five: a sample a round, low rank, data injection
    "sampled": f"{DENSE} num-clients=4 clients-per-round=2 collective=allgather",
    "powersgd": f"{DENSE} collective=powersgd powersgd-rank=2",
    "injection": (
        f"configs/scadles.toml configs/scadles-noniid-injection.toml {DENSE} "
        "injection-alpha=0.5 injection-beta=0.5"
    ),
}


@pytest.mark.parametrize("name", list(RESUMED))
def test_a_resumed_run_records_what_the_uninterrupted_run_does(name: str, tmp_path: Path) -> None:
    text = RESUMED[name]
    run_server_app(InProcessGrid(_settings(text, tmp_path / "whole")))
    # The crash comes in round 4: round 3 (after the checkpoint of round 2) is run again, by
    # new nodes that take their partitions' saved state back.
    resumed = _crash_then_resume(text, tmp_path, crash_round=4)
    assert _rows(resumed) == _rows(tmp_path / "whole")
    assert [r["round"] for r in read_rounds(resumed)] == [1, 2, 3, 4, 5]
    # Only the last checkpoint's client states are kept.
    assert sorted(p.name for p in (resumed / CLIENT_STATE_DIR).iterdir()) == ["round-5"]


VECTOR_KEYS = (RESIDUAL_KEY, REPLICA_KEY)


@pytest.mark.parametrize("name", ["allgather", "allreduce-star", "powersgd", "sampled"])
def test_clients_with_their_vectors_on_disk_record_what_they_do_in_memory_and_resume(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """state-store = disk: every residual, replica and held value goes through a file, the run
    records what it does with them in memory, its checkpoint holds the vectors, a resumed run
    puts them back on disk, and a run removes its store when it ends, crashed or not."""
    in_memory = RESUMED[name]
    store = tmp_path / "store"
    on_disk = f"{in_memory} state-store=disk state-store-dir={store}"
    run_server_app(InProcessGrid(_settings(in_memory, tmp_path / "memory")))
    grid = InProcessGrid(_settings(on_disk, tmp_path / "whole"))
    run_server_app(grid)
    assert _rows(tmp_path / "whole") == _rows(tmp_path / "memory")
    for context in grid.contexts.values():  # records in the contexts, not vectors
        kept = [context.state[k] for k in VECTOR_KEYS if k in context.state]
        assert kept and all(is_stored(record) for record in kept)
    assert store.is_dir() and not any(store.iterdir())  # the run's directory removed

    stopped = tmp_path / "stopped"
    with pytest.raises(Crash):
        run_server_app(CrashingGrid(_settings(f"{on_disk} checkpoint-every=2", stopped), 4))
    assert not any(store.iterdir())  # removed by the crashed run too
    resumed = InProcessGrid(_settings(f"{on_disk} resume-from={stopped}", stopped), 500)
    restored = {}

    def spy(grid: Any, *args: Any) -> set[int]:  # what the nodes hold once they took it back
        taken = restore_client_states(grid, *args)
        restored.update({n: dict(c.state) for n, c in resumed.contexts.items()})
        return taken

    monkeypatch.setattr(server_app, "restore_client_states", spy)
    run_server_app(resumed)
    assert _rows(stopped) == _rows(tmp_path / "memory")
    vectors = [state[k] for state in restored.values() for k in VECTOR_KEYS if k in state]
    assert vectors and all(is_stored(record) for record in vectors)  # none back in memory


def test_a_device_keeps_its_vectors_itself_whatever_the_store_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_app, "app", client_app.make_app(shared_files=False))  # agents'
    text = f"{RESUMED['allgather']} num-server-rounds=2 state-store=disk"
    grid = InProcessGrid(_settings(f"{text} state-store-dir={tmp_path / 'store'}", tmp_path / "r"))
    run_server_app(grid)
    for context in grid.contexts.values():
        assert isinstance(context.state[RESIDUAL_KEY], ArrayRecord)


def test_without_saved_client_states_a_resumed_run_sends_full_models_once(
    tmp_path: Path,
) -> None:
    run_server_app(InProcessGrid(_settings(TOPK, tmp_path / "whole")))
    whole = _rows(tmp_path / "whole")
    stopped = tmp_path / "stopped"
    grid = CrashingGrid(_settings(f"{TOPK} checkpoint-every=2", stopped), 4)
    with pytest.raises(Crash):
        run_server_app(grid)
    shutil.rmtree(stopped / CLIENT_STATE_DIR)  # as a federation without shared files has
    resumed_grid = InProcessGrid(_settings(f"{TOPK} resume-from={stopped}", stopped), 500)
    run_server_app(resumed_grid)
    resumed = _rows(stopped)
    assert resumed[:2] == whole[:2]  # the checkpoint's records, as written
    # Round 3 again: the new clients hold nothing, so each gets the full model.
    assert resumed[2]["model_payloads"] == {"full": 3}
    assert whole[2]["model_payloads"] != {"full": 3}
    assert resumed[2]["bytes_down"] > whole[2]["bytes_down"]
    # The NSGA-II schedule and the clock went on from the checkpoint.
    assert resumed[2]["compression_ratio"] == whole[2]["compression_ratio"]
    assert resumed[2]["virtual_time_s"] > resumed[1]["virtual_time_s"]


def test_a_checkpoint_of_another_configuration_is_refused_with_the_keys(tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    run_server_app(
        InProcessGrid(_settings(f"{DENSE} num-server-rounds=2 checkpoint-every=1", stopped))
    )
    other = f"{DENSE} learning-rate=0.25 seed=9 resume-from={stopped}"
    with pytest.raises(ConfigError, match=r"learning-rate \(0\.5 there, 0\.25 now\), seed"):
        run_server_app(InProcessGrid(_settings(other, tmp_path / "other")))
    done = f"{DENSE} num-server-rounds=2 resume-from={stopped}"
    with pytest.raises(ConfigError, match="leaves nothing to run"):
        run_server_app(InProcessGrid(_settings(done, tmp_path / "done")))
    with pytest.raises(ConfigError, match="no checkpoint at"):
        run_server_app(InProcessGrid(_settings(f"{DENSE} resume-from={tmp_path}", tmp_path / "x")))


def test_keys_a_resumed_run_may_change() -> None:
    written = {"seed": 1, "num-server-rounds": 5, "results-dir": "a", "learning-rate": 0.1}
    now = {"seed": 1, "num-server-rounds": 9, "results-dir": "b", "learning-rate": 0.2}
    assert differing_keys(written, now) == ["learning-rate"]
    assert differing_keys(written, written | {"momentum": 0.9}) == ["momentum"]


FAMILIES = {
    "allreduce-var": f"{DENSE} collective=allreduce leader=var",
    "adaptive": f"{DENSE} collective=allgather adaptive-delta=0.3",
    "flagship": f"configs/flagship.toml {TOPK}",
    "stream-persistence": (
        f"{DENSE} collective=allgather stream-rates=S1 buffer-policy=persistence "
        "batch-policy=fixed "
        "buffer-capacity=64 lr-scaling=linear lr-scale-max=1.5 aggregation-weights=uniform"
    ),
    "sampled-ring": f"{DENSE} num-clients=4 clients-per-round=2 topology=ring collective=allgather",
    "fedadam-recomputed": (
        f"{DENSE} model=cnn1d-bn dataset=mnist1d mnist1d-samples=600 server-optimizer=fedadam "
        "validation-fraction=0.2 batch-norm-statistics=recomputed collective=allgather"
    ),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_strategy_read_from_a_checkpoint_is_the_one_written(
    family: str, tmp_path: Path
) -> None:
    """Every policy's state survives the file: the strategy rebuilt from it, written again,
    gives the same tree and arrays as the strategy that wrote it."""
    settings = _settings(f"{FAMILIES[family]} num-server-rounds=3 checkpoint-every=3", tmp_path)
    ((args, written),) = run_server_app_spying_build(settings)
    config = settings.to_run_config() | {"num-server-rounds": 4}
    read = read_checkpoint(tmp_path, config, fresh=server_build.build_strategy(*args)).strategy
    assert read is not written
    tree, arrays = flatten({"strategy": written.state_dict()})
    tree_again, arrays_again = flatten({"strategy": read.state_dict()})
    assert tree_again == tree
    assert arrays_again.keys() == arrays.keys()
    for key, array in arrays.items():
        np.testing.assert_array_equal(arrays_again[key], array)


class _RunsCode:
    """Unpickling this touches a file: what a crafted pickle would do with a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _stopped_run(tmp_path: Path) -> Path:
    stopped = tmp_path / "stopped"
    run_server_app(
        InProcessGrid(_settings(f"{TOPK} num-server-rounds=2 checkpoint-every=1", stopped))
    )
    return stopped


def _resume(stopped: Path, tmp_path: Path) -> None:
    resumed = f"{TOPK} num-server-rounds=3 resume-from={stopped}"
    run_server_app(InProcessGrid(_settings(resumed, tmp_path / "resumed")))


def test_a_pickled_checkpoint_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    for name in ("checkpoint.pkl", CHECKPOINT_NAME):  # as edgeflex wrote it, or renamed
        stopped = tmp_path / name
        stopped.mkdir()
        (stopped / name).write_bytes(pickle.dumps(_RunsCode(marker)))
        with pytest.raises(ConfigError, match="a pickle, which runs code when it is read"):
            _resume(stopped, tmp_path)
    assert not marker.exists()
    pickle.loads((stopped / CHECKPOINT_NAME).read_bytes())  # the file did hold code
    assert marker.exists()


def test_a_changed_foreign_or_newer_checkpoint_is_refused_with_the_reason(tmp_path: Path) -> None:
    stopped = _stopped_run(tmp_path)
    path = stopped / CHECKPOINT_NAME

    def later_round(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest["parts"]["run"]["rows"][0]["accuracy"] = 0.99

    rewrite(path, later_round, rehash=False)
    with pytest.raises(ConfigError, match="does not match its SHA-256: it was changed"):
        _resume(stopped, tmp_path)

    def newer(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest["edgeflex-state"] = LAYOUT + 1

    rewrite(path, newer, rehash=True)
    with pytest.raises(ConfigError, match=f"a newer edgeflex .*layout {LAYOUT + 1}"):
        _resume(stopped, tmp_path)

    def previous_format(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest.clear()
        manifest.update({"edgeflex-checkpoint": 5, "round": 1, "strategy": {}})

    rewrite(path, previous_format, rehash=False)
    with pytest.raises(
        ConfigError, match=r"a checkpoint of an older edgeflex \(checkpoint format 5"
    ):
        _resume(stopped, tmp_path)

    (stopped / "other.npz").write_bytes(b"not an archive")
    with pytest.raises(ConfigError, match="not an edgeflex state file"):
        _resume(stopped / "other.npz", tmp_path)


def test_an_array_claiming_more_than_it_holds_is_refused_before_it_is_allocated(
    tmp_path: Path,
) -> None:
    stopped = _stopped_run(tmp_path)
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**12, 64)}
    )

    def huge(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        member = manifest["parts"]["model"]["vector"]["$array"]
        members[f"{member}.npy"] = header.getvalue() + b"\0" * 64

    rewrite(stopped / CHECKPOINT_NAME, huge, rehash=False)
    with pytest.raises(ConfigError, match="carries 64 data bytes, expected 512000000000000"):
        _resume(stopped, tmp_path)


def test_a_resumed_run_takes_the_round_timeout_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped = _stopped_run(tmp_path)
    read: list[Any] = []
    reader = server_app.read_checkpoint

    def read_and_keep(*args: Any, **kwargs: Any) -> Any:
        read.append(reader(*args, **kwargs))
        return read[-1]

    monkeypatch.setattr(server_app, "read_checkpoint", read_and_keep)
    resumed = f"{TOPK} num-server-rounds=3 round-timeout-s=30 resume-from={stopped}"
    run_server_app(InProcessGrid(_settings(resumed, tmp_path / "resumed")))
    (checkpoint,) = read
    assert checkpoint.strategy.round_timeout_s == 30.0
    assert checkpoint.strategy.bounds.max_compress_s == 30.0


def test_the_server_logs_the_bytes_its_clients_saved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What benchmarks.resume_cost reports: the size of the round's client state files."""
    settings = _settings(f"{RESUMED['allgather']} num-server-rounds=2 checkpoint-every=2", tmp_path)
    with caplog.at_level("INFO", logger="flwr"):
        run_server_app(InProcessGrid(settings))
    (logged,) = re.findall(r"3 clients saved their state \(([\d.]+) MB\)", caplog.text)
    files = list((tmp_path / CLIENT_STATE_DIR / "round-2").iterdir())
    assert len(files) == 3
    assert float(logged) == round(sum(f.stat().st_size for f in files) / 1e6, 2) > 0
