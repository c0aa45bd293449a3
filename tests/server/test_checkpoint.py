"""Checkpoint and resume, in process: a run that crashed after its last checkpoint, resumed
with fresh clients (as a restarted simulation has), against the same run uninterrupted."""

from pathlib import Path
from typing import Any

import pytest

from common.settings import ConfigError
from scripts.in_process import InProcessGrid, run_server_app
from scripts.run_simulation import parse_overrides, resolve_settings
from server.checkpoint import CHECKPOINT_NAME, differing_keys
from server.records import read_rounds, without_wall_clock
from wire.keys import CONFIG_KEY, SERVER_ROUND

pytestmark = pytest.mark.usefixtures("task_identity")

DENSE = "num-clients=3 num-server-rounds=5 seed=4"
TOPK = f"{DENSE} strategy=topk collective=auto cr-schedule=nsga2 cr-warmup-rounds=1 " + (
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
        rounds = {m.content.config_records[CONFIG_KEY][SERVER_ROUND] for m in messages}
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


def test_a_resumed_dense_run_records_what_the_uninterrupted_run_does(tmp_path: Path) -> None:
    run_server_app(InProcessGrid(_settings(DENSE, tmp_path / "whole")))
    # The crash comes in round 4: rounds 3 (after the checkpoint of round 2) is run again.
    resumed = _crash_then_resume(DENSE, tmp_path, crash_round=4)
    assert _rows(resumed) == _rows(tmp_path / "whole")
    assert [r["round"] for r in read_rounds(resumed)] == [1, 2, 3, 4, 5]


def test_a_resumed_compressed_run_sends_full_models_once_then_goes_on(tmp_path: Path) -> None:
    run_server_app(InProcessGrid(_settings(TOPK, tmp_path / "whole")))
    whole = _rows(tmp_path / "whole")
    resumed = _rows(_crash_then_resume(TOPK, tmp_path, crash_round=4))
    assert resumed[:2] == whole[:2]  # the checkpoint's records, as written
    # Round 3 again: the server no longer knows what the new clients hold.
    assert resumed[2]["model_payloads"] == {"full": 3}
    assert whole[2]["model_payloads"] != {"full": 3}
    assert resumed[2]["bytes_down"] > whole[2]["bytes_down"]
    # The NSGA-II schedule and the clock went on from the checkpoint.
    assert resumed[2]["compression_ratio"] == whole[2]["compression_ratio"]
    assert resumed[2]["virtual_time_s"] > resumed[1]["virtual_time_s"]
    assert len(resumed) == 5


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
