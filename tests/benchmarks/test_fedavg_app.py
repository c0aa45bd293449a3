"""The FedAvg yardstick of benchmarks/bench_flower_fedavg.py runs on edgeflex's settings: its
ServerApp and ClientApp over the in-process federation."""

import json
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from common.settings import PROJECT_ROOT, settings_with
from testing.in_process import InProcessGrid

pytestmark = pytest.mark.usefixtures("task_identity")


def test_the_yardstick_trains_and_notes_each_round_s_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "benchmarks" / "fedavg_app"))
    from fedavg_app import client_app, server_app

    settings = settings_with(num_clients=3, num_server_rounds=2)
    times = tmp_path / "times.json"
    config = settings.to_run_config() | {"times-file": str(times)}
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config)
    grid = InProcessGrid(settings, app=client_app.app)
    server_app.main(grid, context)
    noted = json.loads(times.read_text())
    assert len(noted["round_ends"]) == 3  # the initial evaluation and two rounds
    assert noted["round_ends"] == sorted(noted["round_ends"])
    assert 0.0 < noted["accuracy"] <= 1.0
    assert [kind for kind, _ in grid.sent] == ["train"] * 6
