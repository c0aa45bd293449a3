"""benchmarks.collective_segments: auto's choices and predictions, by segment of the schedule."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.collective_segments import rows_of


def test_rounds_are_counted_and_predictions_averaged_per_segment(tmp_path: Path) -> None:
    config = {"network": "c1-edge", "networks-file": "configs/networks.toml"}
    config |= {"num-clients": 3, "seed": 0}
    (tmp_path / "summary.json").write_text(json.dumps({"config": config}))
    rounds = [
        {"round": r, "collective": "b" if r > 36 else "a", "predicted": {"a": 0.002, "b": 0.004}}
        for r in range(1, 41)
    ]
    rounds[0]["predicted"] = None  # the first rounds predict nothing
    (tmp_path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    first, second = rows_of(tmp_path)  # c1-edge changes at round 37 (epochs of 3 rounds)
    assert "| 1-36 | 1 ms, 25 Mbit/s | a 36 | a 2.0, b 4.0 |" in first
    assert "| 37-40 | 1 ms, 1 Mbit/s | b 4 | a 2.0, b 4.0 |" in second
