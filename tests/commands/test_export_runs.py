"""commands/export_runs.py: the event files read back with TensorBoard's own reader."""

from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from commands import export_runs
from tests.commands.run_records import rows, write_run


def _records() -> list[dict]:
    out = rows([0.25, 0.5, 0.8125], [0.7, 1.9, 3.1])
    for i, row in enumerate(out):
        row |= {
            "loss": 2.0 / (i + 1),
            "collective": "dense",  # a string: not a scalar
            "refused": [],  # a list: not a scalar
            "predicted": None,
            "stream": {"buffer_samples_max": 40 + i, "wait_s_mean": 0.1 * i},
        }
    return out


def test_every_number_of_every_round_reads_back_at_its_round_and_virtual_time(
    tmp_path: Path,
) -> None:
    records = _records()
    write_run(tmp_path / "runs" / "topk" / "seed-7", records, collective="allgather")
    out = tmp_path / "tb"
    export_runs.main([str(tmp_path / "runs" / "topk"), "--out", str(out)])

    reader = EventAccumulator(str(out / "topk" / "seed-7"), size_guidance={"scalars": 0})
    reader.Reload()
    tags = reader.Tags()["scalars"]
    expected = {
        "virtual_time_s",
        "accuracy",
        "loss",
        "bytes_up",
        "bytes_down",
        "stream/buffer_samples_max",
        "stream/wait_s_mean",
    }
    assert set(tags) == expected
    for tag in expected:
        outer, _, inner = tag.partition("/")
        want = [r[outer][inner] if inner else r[tag] for r in records]
        events = reader.Scalars(tag)
        assert [e.step for e in events] == [r["round"] for r in records]
        assert [e.wall_time for e in events] == [r["virtual_time_s"] for r in records]
        # TensorBoard keeps a scalar as float32
        assert [e.value for e in events] == [float(np.float32(v)) for v in want]
    assert "config/text_summary" in reader.Tags()["tensors"]


def test_a_second_export_to_the_same_place_and_an_unfinished_run_are_refused(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path / "runs" / "a" / "seed-1", _records())
    export_runs.main([str(run), "--out", str(tmp_path / "tb")])
    with pytest.raises(SystemExit, match="exported there already"):
        export_runs.main([str(run), "--out", str(tmp_path / "tb")])
    (tmp_path / "runs" / "b").mkdir()
    with pytest.raises(SystemExit, match="no summary.json"):
        export_runs.main([str(tmp_path / "runs" / "b"), "--out", str(tmp_path / "tb2")])
    assert not (tmp_path / "tb2").exists()  # nothing written
