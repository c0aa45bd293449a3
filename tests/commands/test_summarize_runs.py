"""commands/summarize_runs.py: the last-rounds ruler of finished runs, of any per-round field."""

import json
from pathlib import Path

import pytest

from commands import summarize_runs


def _run(directory: Path, accuracies: list[float], recomputed: list[float]) -> None:
    directory.mkdir(parents=True)
    rows = [
        {
            "round": i + 1,
            "accuracy": a,
            "recomputed_accuracy": r,
            "bytes_up": 1_000_000,
            "bytes_down": 2_000_000,
            "virtual_time_s": float(i + 1),
        }
        for i, (a, r) in enumerate(zip(accuracies, recomputed, strict=True))
    ]
    (directory / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"collective": "dense"}
    (directory / "summary.json").write_text(json.dumps({"config": config}))


def test_a_table_of_a20_s20_m20_per_field_leaving_unfinished_runs_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 25 rounds: the last 20 of accuracy are 0.5 and 0.7 alternating, of recomputed all 0.9
    accuracies = [0.1] * 5 + [0.5, 0.7] * 10
    _run(tmp_path / "a" / "seed-1", accuracies, [0.2] * 5 + [0.9] * 20)
    (tmp_path / "b" / "seed-1").mkdir(parents=True)  # still running: no summary yet
    summarize_runs.main(
        [
            str(tmp_path / "a" / "seed-1"),
            str(tmp_path / "b" / "seed-1"),
            "--field",
            "recomputed_accuracy",
        ]
    )
    out, err = capsys.readouterr()
    line = next(x for x in out.splitlines() if x.startswith("| a/seed-1"))
    assert "| 25 | 0.6000 | 0.1000 | 0.5000 | 0.9000 | 0.0000 | 0.9000 | 25.00 |" in line
    assert "b/seed-1" in err and "b/seed-1" not in out
