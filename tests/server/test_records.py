import json
from pathlib import Path

from server.records import RunRecorder, progress_line, read_rounds
from strategies.ledger import RoundStats
from tests.helpers import REQUIRED_ROUND_FIELDS


def _stats(r: int, t: float) -> RoundStats:
    return RoundStats(
        round=r,
        virtual_time_s=t,
        round_time_s=1.0,
        bytes_up=10 * r,
        bytes_down=20 * r,
        num_clients=3,
        train_loss=0.5,
    )


def test_rounds_summary_and_plot(tmp_path: Path) -> None:
    recorder = RunRecorder(tmp_path / "run", {"collective": "dense", "dataset": "digits"})
    recorder.record_initial(0.1, 2.3)
    recorder.record_round(_stats(1, 1.5), accuracy=0.6, loss=1.0)
    row = recorder.record_round(_stats(2, 3.0), accuracy=0.5, loss=1.1)
    summary = recorder.finish()

    rows = read_rounds(tmp_path / "run")
    assert [r["round"] for r in rows] == [1, 2]
    assert set(rows[0]) >= REQUIRED_ROUND_FIELDS
    assert rows[1] == row
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk == summary
    assert summary["final_accuracy"] == 0.5 and summary["best_accuracy"] == 0.6
    assert summary["best_round"] == 1
    assert summary["bytes_up"] == 30 and summary["bytes_down"] == 60
    assert summary["virtual_time_s"] == 3.0
    assert summary["config"]["collective"] == "dense"
    assert (tmp_path / "run" / "accuracy.png").stat().st_size > 1000
    assert (tmp_path / "run" / "accuracy.svg").read_text().startswith("<?xml")
    assert "round    2/5" in progress_line(row, 5) and "acc 0.5000" in progress_line(row, 5)
