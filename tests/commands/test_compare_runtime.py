"""A lane (one SuperLink, one Ray head) serves runs one after another, the next submitted as the
last one's records are written (as ``commands.compare`` does): each run's records equal the same
run's started alone by ``commands.run``, each in its own results directory, and nothing the lane
started outlives it."""

import subprocess
import time
from pathlib import Path

import pytest

from commands import compare_runtime
from commands.run import run
from commands.run_config import parse_overrides
from server.records import read_rounds, without_wall_clock
from tests.helpers import processes_with_env

pytestmark = pytest.mark.slow  # a SuperLink, a Ray head and three simulations

RUNS = {
    "dense": "num-clients=3 num-server-rounds=2 stream-rates=S2 seed=3",
    "topk": "num-clients=3 num-server-rounds=2 collective=allgather compression-ratio=0.1 seed=4",
}


def _records(results_dir: Path) -> list[dict[str, object]]:
    return [without_wall_clock(row) for row in read_rounds(results_dir)]


def test_runs_on_one_lane_equal_runs_started_alone(tmp_path: Path) -> None:
    with compare_runtime.lane(tmp_path / "lane") as lane:
        procs: dict[str, subprocess.Popen[bytes]] = {}
        for name, text in RUNS.items():  # the next submitted as soon as the last has records
            while procs and not (tmp_path / "dense" / "summary.json").exists():
                assert procs["dense"].poll() is None, (tmp_path / "dense" / "run.log").read_text()
                time.sleep(0.2)
            overrides = parse_overrides(f"{text} results-dir={tmp_path / name}")
            (tmp_path / name).mkdir()
            procs[name] = lane.submit(overrides, tmp_path / name / "run.log")
        for name, proc in procs.items():
            assert proc.wait(timeout=600) == 0, (tmp_path / name / "run.log").read_text()[-3000:]
        assert processes_with_env("FLWR_HOME", str(lane.flwr_home))  # its SuperLink is up
        assert processes_with_env("RAY_TMPDIR", str(lane.ray_temp_dir))  # and its Ray
    assert not processes_with_env("FLWR_HOME", str(lane.flwr_home))
    assert not processes_with_env("RAY_TMPDIR", str(lane.ray_temp_dir))
    assert not lane.flwr_home.exists()

    overrides = parse_overrides(f"{RUNS['topk']} results-dir={tmp_path / 'alone'}")
    with (tmp_path / "alone.log").open("w") as out:
        code, results = run(overrides, stream_to=out)
    assert code == 0, (tmp_path / "alone.log").read_text()[-3000:]
    assert _records(results) == _records(tmp_path / "topk")
    assert _records(tmp_path / "dense") != _records(tmp_path / "topk")
