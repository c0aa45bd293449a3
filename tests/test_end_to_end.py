"""Simulations through ``flwr run``: the records match the in-process run's; a stopped run
stops its SuperLink."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commands import run as run_simulation
from common.settings import PROJECT_ROOT
from server.records import WALL_CLOCK_FIELDS, read_rounds
from testing.in_process import InProcessGrid, run_server_app
from tests.helpers import REQUIRED_ROUND_FIELDS, processes_with_env

# Top-k Allreduce with the variance leader: the custom actions train.indices and train.values
# route through the real runtime (three phases a round), sparse both ways.
pytestmark = pytest.mark.slow  # starts processes


TOPK_ALLREDUCE = {
    "num-clients": 3,
    "num-server-rounds": 2,
    "seed": 11,
    "collective": "allreduce",
    "leader": "var",
    "compression-ratio": 0.01,
}


def _strip(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rows]


@pytest.mark.usefixtures("task_identity")
def test_simulation_writes_the_records_of_the_in_process_run(tmp_path: Path) -> None:
    """Flower's simulation runtime gives the records the in-process grid gives (which the
    golden records pin, run after run): the same seed, the same rounds, bit for bit."""
    results = tmp_path / "simulation"
    code, results_dir = run_simulation.run(TOPK_ALLREDUCE | {"results-dir": str(results)})
    assert code == 0, (results / "superlink.log").read_text()[-3000:]
    assert results_dir == results
    rows = read_rounds(results)

    assert [r["round"] for r in rows] == [1, 2]
    for row in rows:
        assert set(row) >= REQUIRED_ROUND_FIELDS
        assert row["num_clients"] == 3 and row["refused"] == []
        assert row["collective"] == "allreduce" and row["compression_ratio"] == 0.01
        assert 0.0 <= row["accuracy"] <= 1.0
    assert [p["name"] for p in rows[1]["phases"]] == ["train", "indices", "values"]
    assert rows[1]["bytes_up"] < rows[1]["bytes_down"] < 3 * 4 * 50_826  # sparse both ways
    assert rows[1]["virtual_time_s"] > rows[0]["virtual_time_s"] > 0

    in_process = tmp_path / "in-process"
    settings = run_simulation.resolve_settings(TOPK_ALLREDUCE | {"results-dir": str(in_process)})
    run_server_app(InProcessGrid(settings))
    assert _strip(rows) == _strip(read_rounds(in_process))

    summary = json.loads((results / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["config"]["num-clients"] == 3
    assert summary["final_accuracy"] == rows[-1]["accuracy"]
    assert (results / "accuracy.png").exists()
    # The engine's pickup was shortened before it started (common/flower_patches.py).
    assert "simulation pickup every 0.005 s" in (results / "flower.log").read_text()

    # Nothing the run started is still running (its FLWR_HOME names this process).
    assert (
        processes_with_env("FLWR_HOME", str(run_simulation.FLWR_DIR / f"home-{os.getpid()}-")) == []
    )


def test_interrupted_run_stops_its_superlink(tmp_path: Path) -> None:
    """SIGTERM here; Ctrl-C (SIGINT) through the same ``launch`` in the federation's test."""
    sig = signal.SIGTERM
    results = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands.run",
            "--run-config",
            f"num-clients=2 num-server-rounds=500 results-dir={results}",
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        rounds = results / "rounds.jsonl"
        while not (rounds.exists() and rounds.read_text().strip()):
            assert proc.poll() is None, "the run ended before it could be interrupted"
            assert time.monotonic() < deadline, "no round finished within 120 s"
            time.sleep(0.5)
        proc.send_signal(sig)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code != 0
    assert not (results / "summary.json").exists()
    assert processes_with_env("FLWR_HOME", str(run_simulation.FLWR_DIR / f"home-{proc.pid}-")) == []
