"""A 3-client, 2-round simulation through ``flwr run``, twice with one seed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.settings import PROJECT_ROOT
from scripts import run_simulation
from server.records import WALL_CLOCK_FIELDS, read_rounds
from tests.helpers import REQUIRED_ROUND_FIELDS, processes_with_env


def _run(results: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    overrides = {"num-clients": 3, "num-server-rounds": 2, "seed": 11, "results-dir": str(results)}
    code, results_dir = run_simulation.run(overrides)
    assert code == 0, (results / "superlink.log").read_text()[-3000:]
    assert results_dir == results
    return read_rounds(results)


def test_simulation_writes_records_and_is_deterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _run(tmp_path / "a", capsys)
    second = _run(tmp_path / "b", capsys)

    assert [r["round"] for r in first] == [1, 2]
    for row in first:
        assert set(row) >= REQUIRED_ROUND_FIELDS
        assert row["num_clients"] == 3 and row["collective"] == "dense"
        assert row["compression_ratio"] == 1.0
        assert row["bytes_up"] > 3 * 4 * 50_826  # three full float32 updates
        assert row["bytes_down"] > 3 * 4 * 50_826
        assert 0.0 <= row["accuracy"] <= 1.0
    assert first[1]["virtual_time_s"] > first[0]["virtual_time_s"] > 0

    def strip(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rows]

    assert strip(first) == strip(second)

    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["config"]["num-clients"] == 3
    assert summary["final_accuracy"] == first[-1]["accuracy"]
    assert (tmp_path / "a" / "accuracy.png").exists()

    # Nothing these runs started is still running (their FLWR_HOME names this process).
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
            "scripts.run_simulation",
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


def test_topk_allreduce_phases_run_through_flower(tmp_path: Path) -> None:
    """The custom actions train.indices and train.values route through the real runtime."""
    overrides = {
        "num-clients": 3,
        "num-server-rounds": 2,
        "strategy": "topk",
        "collective": "allreduce",
        "leader": "var",
        "compression-ratio": 0.01,
        "results-dir": str(tmp_path),
    }
    code, _ = run_simulation.run(overrides)
    assert code == 0, (tmp_path / "superlink.log").read_text()[-3000:]
    rows = read_rounds(tmp_path)
    assert [r["collective"] for r in rows] == ["allreduce", "allreduce"]
    assert all(r["num_clients"] == 3 and r["refused"] == [] for r in rows)
    assert [p["name"] for p in rows[1]["phases"]] == ["train", "indices", "values"]
    assert rows[1]["bytes_up"] < rows[1]["bytes_down"] < 3 * 4 * 50_826  # sparse both ways
    assert (
        processes_with_env("FLWR_HOME", str(run_simulation.FLWR_DIR / f"home-{os.getpid()}-")) == []
    )
